#!/bin/sh
# compose.secure.yaml's `certs` service: makes the stack's private CA, the
# server certificates and every secret at start, into named volumes (nothing
# here is ever committed). Made once and kept in the `secure-pki` volume (the
# CA's key lives only there); copied on every start into one volume per
# consumer, so a container mounts only what it uses:
#
#   /out/ca      -> prometheus               ca.pem
#   /out/sluice  -> every sluice part        ca.pem, gate and console certificates,
#                                            Redis and Kafka passwords, token files,
#                                            the callback secret (consul-acl adds consul/*.token)
#   /out/kafka   -> kafka, kafka-init        ca.pem, kafka.pem (key + chain, PEM keystore),
#                                            SCRAM passwords, admin.properties
#   /out/redis   -> redis                    ca.pem, redis.pem, redis-key.pem, users.acl
#   /out/consul  -> consul, consul-acl       ca.pem, consul.pem, consul-key.pem,
#                                            acl-tokens.hcl, management-token
#
# A certificate within 30 days of its end is made again (the gate and the
# console pick a renewed one up without a restart); a new CA makes every
# certificate again. Delete the secure-pki volume to start over.
set -eu

PKI=/pki
umask 077
mkdir -p "$PKI/server"

# secret NAME: 48 random hex characters, made once.
secret() { [ -s "$PKI/$1" ] || openssl rand -hex 24 >"$PKI/$1"; }
# uuid NAME: a random UUID (Consul's tokens are UUIDs), made once.
uuid() { [ -s "$PKI/$1" ] || cat /proc/sys/kernel/random/uuid >"$PKI/$1"; }
fresh() { [ -s "$1" ] && openssl x509 -checkend 2592000 -noout -in "$1" >/dev/null; }

if ! fresh "$PKI/ca.pem"; then
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
		-subj "/CN=sluice compose CA" -keyout "$PKI/ca-key.pem" -out "$PKI/ca.pem" \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	rm -f "$PKI"/server/*
fi

# server NAME DNS...: a certificate for the DNS names, localhost and
# 127.0.0.1 (the healthchecks dial that), its key in PKCS#8 PEM.
server() {
	name=$1
	shift
	fresh "$PKI/server/$name.pem" && return 0
	san="DNS:localhost,IP:127.0.0.1"
	for d in "$@"; do san="$san,DNS:$d"; done
	printf 'subjectAltName=%s\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n' "$san" >"$PKI/server/$name.ext"
	openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
		-keyout "$PKI/server/$name-key.pem" -out "$PKI/server/$name.csr" 2>/dev/null
	openssl x509 -req -in "$PKI/server/$name.csr" -CA "$PKI/ca.pem" -CAkey "$PKI/ca-key.pem" -CAcreateserial \
		-days 365 -extfile "$PKI/server/$name.ext" -out "$PKI/server/$name.pem" 2>/dev/null
	echo "certs: made $name's certificate for $san"
}
server kafka kafka
server redis redis
server consul consul server.dc1.consul
server gate gate
server console coordinator-1 coordinator-2

secret kafka-sluice-password  # SCRAM-SHA-512 user sluice: every part
secret kafka-admin-password   # SCRAM-SHA-512 user admin: kafka-init, the healthcheck
secret redis-password         # ACL user sluice
secret redis-health-password  # ACL user health: PING only, for the healthcheck
secret client-token           # gate: topic jobs
secret canary-token           # gate: jobs,+canary (the coordinators' canaries)
secret periodic-token         # gate: jobs (the coordinators' periodic jobs)
secret admin-token            # console: admin
secret read-token             # console: read
secret callback-secret        # Sluice-Signature of callbacks
uuid consul-management-token  # Consul's initial management token (also the agent's)

# put SRC DST: copy into a consumer volume, readable by the consumer's user
# (each volume is mounted only where its files are used); written beside
# and renamed, so a part re-reading a file never sees half of it.
put() {
	mkdir -p "$(dirname "$2")"
	chmod 0755 "$(dirname "$2")"
	cp "$1" "$2.tmp"
	chmod 0444 "$2.tmp"
	mv "$2.tmp" "$2"
}
# write DST: standard input to DST, as put.
write() {
	cat >"$PKI/.tmp"
	put "$PKI/.tmp" "$1"
	rm -f "$PKI/.tmp"
}
v() { cat "$PKI/$1"; }

put "$PKI/ca.pem" /out/ca/ca.pem

# The sluice parts.
put "$PKI/ca.pem" /out/sluice/ca.pem
put "$PKI/server/gate.pem" /out/sluice/gate.pem
put "$PKI/server/gate-key.pem" /out/sluice/gate-key.pem
put "$PKI/server/console.pem" /out/sluice/console.pem
put "$PKI/server/console-key.pem" /out/sluice/console-key.pem
put "$PKI/kafka-sluice-password" /out/sluice/kafka-password
put "$PKI/redis-password" /out/sluice/redis-password
put "$PKI/canary-token" /out/sluice/canary-token
put "$PKI/periodic-token" /out/sluice/periodic-token
put "$PKI/callback-secret" /out/sluice/callback-secret
put "$PKI/client-token" /out/sluice/client-token
put "$PKI/admin-token" /out/sluice/admin-token
write /out/sluice/gate-tokens <<TOKENS
# <token> <topics> <name> (docs/gate.md#authentication)
$(v client-token) jobs client
$(v canary-token) jobs,+canary canary
$(v periodic-token) jobs periodic
TOKENS
write /out/sluice/admin-tokens <<TOKENS
# <token> <role> <name> (docs/admin.md#authentication)
$(v admin-token) admin admin
$(v read-token) read read
TOKENS

# Kafka: the PEM keystore is the key followed by the certificate chain.
put "$PKI/ca.pem" /out/kafka/ca.pem
cat "$PKI/server/kafka-key.pem" "$PKI/server/kafka.pem" "$PKI/ca.pem" >"$PKI/kafka-keystore.pem"
put "$PKI/kafka-keystore.pem" /out/kafka/kafka.pem
put "$PKI/kafka-sluice-password" /out/kafka/sluice-password
put "$PKI/kafka-admin-password" /out/kafka/admin-password
write /out/kafka/admin.properties <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$(v kafka-admin-password)";
ssl.truststore.type=PEM
ssl.truststore.location=/run/kafka/ca.pem
PROPS

# Redis: the ACL file holds SHA-256 hashes of the passwords, never the
# passwords; the default user is off.
hash() { printf %s "$(v "$1")" | openssl dgst -sha256 -r | cut -d' ' -f1; }
put "$PKI/ca.pem" /out/redis/ca.pem
put "$PKI/server/redis.pem" /out/redis/redis.pem
put "$PKI/server/redis-key.pem" /out/redis/redis-key.pem
put "$PKI/redis-health-password" /out/redis/health-password
write /out/redis/users.acl <<ACL
user default off resetkeys resetchannels -@all
user sluice on #$(hash redis-password) ~sluice:* &* +@all
user health on #$(hash redis-health-password) resetkeys resetchannels -@all +ping
ACL

# Consul: its certificate and the tokens part of its configuration.
put "$PKI/ca.pem" /out/consul/ca.pem
put "$PKI/server/consul.pem" /out/consul/consul.pem
put "$PKI/server/consul-key.pem" /out/consul/consul-key.pem
put "$PKI/consul-management-token" /out/consul/management-token
write /out/consul/acl-tokens.hcl <<HCL
# Made by compose.secure.yaml's certs service. The agent token is the
# management token here; give agents a token of their own (node write)
# anywhere else.
acl {
  tokens {
    initial_management = "$(v consul-management-token)"
    agent              = "$(v consul-management-token)"
  }
}
HCL
echo "certs: done"
