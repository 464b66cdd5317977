"""The peers' own test files are run by test_keras_peers.py and test_keras3_peers.py, each in
a process of its own and as its project runs them: this suite does not collect them."""

collect_ignore = ["keras-3.15.1", "keras3-1.2.0"]
