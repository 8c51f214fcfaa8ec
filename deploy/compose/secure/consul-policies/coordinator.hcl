# sluice coordinator, stage compose: the least policy (docs/secure/consul.md)
# the coordinator's lock
key "sluice/compose/coordinator/lock" {
  policy = "write"
}
# the scaling parameters (scaling) and the operators' pins (scaling/pins/), watched
key_prefix "sluice/compose/scaling" {
  policy = "read"
}
# the periodic schedules, watched (their state is in Redis)
key_prefix "sluice/compose/periodic/" {
  policy = "read"
}
# its lock's session: create, renew, destroy (narrow to session "<agent node>" if every agent's node name is known)
session_prefix "" {
  policy = "write"
}
