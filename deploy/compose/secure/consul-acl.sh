#!/bin/sh
# compose.secure.yaml's `consul-acl` service: with the management token,
# creates (or updates) one Consul ACL policy per sluice part from
# consul-policies/<part>.hcl -- exactly `sluice consul-policy --stage compose
# --topics jobs <part>`, which cmd/sluice/compose_test.go checks -- and one
# token per service kind, written to /run/sluice/consul/<name>.token for the
# parts' --consul-token-file. A token whose file exists and that Consul still
# knows is kept, so a second `up` changes nothing.
set -eu
export CONSUL_HTTP_ADDR=https://consul:8500
export CONSUL_CACERT=/run/consul/ca.pem
export CONSUL_HTTP_TOKEN_FILE=/run/consul/management-token
STAGE=compose
mkdir -p /run/sluice/consul
chmod 0755 /run/sluice/consul

# policy PART: sluice-<stage>-<part> with the rules of /policies/<part>.hcl.
policy() {
	if consul acl policy read -name "sluice-$STAGE-$1" >/dev/null 2>&1; then
		consul acl policy update -name "sluice-$STAGE-$1" -rules "@/policies/$1.hcl" >/dev/null
	else
		consul acl policy create -name "sluice-$STAGE-$1" -description "sluice $1, stage $STAGE" -rules "@/policies/$1.hcl" >/dev/null
	fi
	echo "consul-acl: policy sluice-$STAGE-$1"
}

# token NAME PART...: a token of the parts' policies, its SecretID in
# /run/sluice/consul/NAME.token.
token() {
	file=/run/sluice/consul/$1.token
	name=$1
	shift
	parts="$*"
	if [ -s "$file" ] && consul acl token read -self -token-file "$file" >/dev/null 2>&1; then
		return 0
	fi
	id=$(cat /proc/sys/kernel/random/uuid)
	set --
	for p in $parts; do set -- "$@" -policy-name "sluice-$STAGE-$p"; done
	consul acl token create -description "sluice $name, stage $STAGE" -secret "$id" "$@" >/dev/null
	printf '%s\n' "$id" >"$file.tmp"
	chmod 0444 "$file.tmp"
	mv "$file.tmp" "$file"
	echo "consul-acl: token $name ($parts)"
}

policy relay
policy worker
policy coordinator
policy console

# The coordinator serves the console in its process: both policies.
token relay relay
token worker worker
token coordinator coordinator console
