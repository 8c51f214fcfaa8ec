# sluice relay, stage compose: the least policy (docs/secure/consul.md)
# topic jobs's lock
key "sluice/compose/relay/jobs/lock" {
  policy = "write"
}
# topic jobs's relay rate, watched
key "sluice/compose/relay/jobs/rate" {
  policy = "read"
}
# the stage's topic list, watched (--follow-topics; a listed topic's lock and rate need the relay/ rules above: narrowed to --topics, list them too)
key_prefix "sluice/compose/topics/" {
  policy = "read"
}
# its lock's session: create, renew, destroy (narrow to session "<agent node>" if every agent's node name is known)
session_prefix "" {
  policy = "write"
}
