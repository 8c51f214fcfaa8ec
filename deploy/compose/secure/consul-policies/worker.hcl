# sluice worker, stage compose: the least policy (docs/secure/consul.md)
# the execution rate limits, watched
key_prefix "sluice/compose/limits/" {
  policy = "read"
}
