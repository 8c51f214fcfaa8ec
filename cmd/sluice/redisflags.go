package main

import (
	"fmt"
	"strings"

	"github.com/sluicehq/sluice/internal/queue"
)

// redisPool builds a pool of the partitions at loc (sluice canary's and
// sluice stats', whose --stage and --redis-* flags are loc's
// RegisterFlags); it connects to nothing yet. Its errors name the flag.
func redisPool(loc queue.StageRedis) (redisSide, error) {
	if err := loc.Validate(); err != nil {
		// Validate's errors start with the field: "PartitionAddrs: ...".
		field, msg, _ := strings.Cut(err.Error(), ": ")
		if name, ok := fieldFlags(loc)[field]; ok {
			return nil, fmt.Errorf("--%s: %s", name, msg)
		}
		return nil, err
	}
	return openRedis(loc.PoolConfig())
}
