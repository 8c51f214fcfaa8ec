#!/bin/bash
# compose.secure.yaml's Kafka: renders the KAFKA_* environment into
# server.properties with the apache/kafka image's own mapping (KAFKA_ dropped,
# lower case, "_" -> ".", "__" -> "_", "___" -> "-"), formats the KRaft
# storage once with the SCRAM-SHA-512 users (KRaft cannot create the first
# SCRAM user over a listener that needs one), then starts the broker.
#
# It stands in for the image's own start script, which insists on JKS-style
# keystore password files that a PEM keystore (ssl.keystore.type=PEM) must
# not have.
set -euo pipefail
props=/tmp/server.properties
: >"$props"
for var in $(compgen -e); do
	case "$var" in
	KAFKA_HEAP_OPTS | KAFKA_OPTS | KAFKA_JMX_OPTS | KAFKA_LOG4J_OPTS | KAFKA_GC_LOG_OPTS | KAFKA_JVM_PERFORMANCE_OPTS | KAFKA_JMX_PORT | KAFKA_JMX_HOSTNAME | KAFKA_DEBUG) continue ;;
	KAFKA_*) ;;
	*) continue ;;
	esac
	key=$(printf '%s' "${var#KAFKA_}" | tr 'A-Z' 'a-z' | sed -e 's/___/-/g' -e 's/__/@/g' -e 's/_/./g' -e 's/@/_/g')
	printf '%s=%s\n' "$key" "${!var}" >>"$props"
done

# --ignore-formatted: a second start keeps the users it has (change a
# password with kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[...]').
/opt/kafka/bin/kafka-storage.sh format --ignore-formatted --cluster-id "$CLUSTER_ID" --config "$props" \
	--add-scram "SCRAM-SHA-512=[name=sluice,password=$(cat /run/kafka/sluice-password)]" \
	--add-scram "SCRAM-SHA-512=[name=admin,password=$(cat /run/kafka/admin-password)]"
exec /opt/kafka/bin/kafka-server-start.sh "$props"
