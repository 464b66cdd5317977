library(testthat)
library(tfdistributed)

test_check("tfdistributed")
