# sluice console, stage compose: the least policy (docs/secure/consul.md)
# the relay rates, listed (GET /api/v1/rates)
key_prefix "sluice/compose/relay/" {
  policy = "read"
}
# topic jobs's relay rate, set and lifted
key "sluice/compose/relay/jobs/rate" {
  policy = "write"
}
# the execution rate limits, listed, set and lifted
key_prefix "sluice/compose/limits/" {
  policy = "write"
}
# the scaling parameters, shown by a console without a coordinator in its process
key "sluice/compose/scaling" {
  policy = "read"
}
# the scale pins, listed, set and lifted
key_prefix "sluice/compose/scaling/pins/" {
  policy = "write"
}
# the periodic schedules, listed, created, changed, paused and deleted
key_prefix "sluice/compose/periodic/" {
  policy = "write"
}
# the stage's topic list: sluice topics create, ls, describe, delete
key_prefix "sluice/compose/topics/" {
  policy = "write"
}
