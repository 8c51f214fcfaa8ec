# sluice worker, stage compose: the least policy (docs/secure/consul.md)
# the execution rate limits, watched
key_prefix "sluice/compose/limits/" {
  policy = "read"
}
# the stage's topic list, watched by a worker that follows it (sluice dev's)
key_prefix "sluice/compose/topics/" {
  policy = "read"
}
