# compose.secure.yaml's Consul agent: ACLs on with default deny, HTTPS only
# (on 8500, the port compose.yaml publishes for the UI; plain HTTP off).
# The tokens (initial management, agent) are in /run/consul/acl-tokens.hcl,
# made at start by the certs service; never in this file.
acl {
  enabled                  = true
  default_policy           = "deny"
  enable_token_persistence = true
}

ports {
  http  = -1
  https = 8500
}

tls {
  defaults {
    ca_file         = "/run/consul/ca.pem"
    cert_file       = "/run/consul/consul.pem"
    key_file        = "/run/consul/consul-key.pem"
    verify_incoming = false
    verify_outgoing = false
  }
}
