//go:build tools

// Package tools pins the Consul agent that tests and `sluice dev` run as a child
// process. It is a module of its own so the agent's large dependency tree never
// touches the main module's go.sum.
package tools

import _ "github.com/hashicorp/consul"
