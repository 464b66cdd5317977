"""Run in a fresh interpreter by test_rpy2.py: R (through rpy2, in this process) and Python train
the same seeded digits model under MirroredStrategy on 2 logical CPUs; prints one JSON line.

A fresh process because the devices must be configured before TensorFlow initializes, here by
the R side (`distribute_strategy("mirrored", num_cpu_devices = 2)`), whatever the pytest process
did before. It also exercises teardown: R's gc() frees Python objects, then the interpreter exits.
"""

import json

import numpy as np

N, EPOCHS, BATCH, SEED = 512, 3, 64, 7


def main():
    import rpy2.robjects as robjects

    r = robjects.r
    r("suppressPackageStartupMessages(library(tfdistributed))")
    r(f"""
      strategy <- distribute_strategy("mirrored", num_cpu_devices = 2)
      digits <- digits_data()
      x <- digits$train$x[1:{N}, , , , drop = FALSE]
      y <- digits$train$y[1:{N}]
      keras$utils$set_random_seed({SEED}L)
      with(strategy$scope(), {{
        model <- keras$Sequential(list(
          keras$Input(shape = input_shape(8, 8, 1)),
          keras$layers$Flatten(),
          keras$layers$Dense(64L, activation = "relu"),
          keras$layers$Dense(10L)
        ))
        model$compile(optimizer = "adam", metrics = list("accuracy"),
                      loss = keras$losses$SparseCategoricalCrossentropy(from_logits = TRUE))
      }})
      history <- fit_distributed(model, x, y, epochs = {EPOCHS}, batch_size = {BATCH},
                                 shuffle = FALSE, verbose = 0)
      reticulate::py_set_attr(reticulate::import_main(), "r_model", model)
    """)
    import __main__

    import keras
    import tfdistributed as tfd

    r_model = __main__.r_model
    r_loss = list(r("history$metrics$loss"))
    r_info = tfd.strategy_info(r_model.distribute_strategy)

    (x, y), _ = tfd.digits_arrays()
    strategy = r_model.distribute_strategy  # one MirroredStrategy per process (collective keys)
    keras.utils.set_random_seed(SEED)
    with strategy.scope():
        model = keras.Sequential([
            keras.Input(shape=(8, 8, 1)), keras.layers.Flatten(),
            keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
        model.compile(optimizer="adam", metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = tfd.fit(model, x[:N], y[:N], epochs=EPOCHS, batch_size=BATCH, shuffle=False, verbose=0)

    diffs = [float(np.max(np.abs(a - b))) for a, b in zip(r_model.get_weights(), model.get_weights())]
    # Teardown under load: R frees its Python objects, then Python exits normally.
    del __main__.r_model, r_model
    r("rm(model, history, strategy); for (i in 1:20) invisible(gc())")
    print("RESULT " + json.dumps({
        "r_info": r_info, "py_info": tfd.strategy_info(strategy), "max_weight_diff": max(diffs),
        "num_weights": len(diffs), "r_loss": r_loss, "py_loss": history.history["loss"],
    }), flush=True)


if __name__ == "__main__":
    main()
