package admin

import "time"

// The topics endpoints (docs/topics.md): /api/v1/topics.

// TopicCreate is POST /api/v1/topics' body. Zero Partitions and
// Replication take the defaults (internal/topics).
type TopicCreate struct {
	Name        string `json:"name"`
	Partitions  int    `json:"partitions,omitempty"`
	Replication int    `json:"replication,omitempty"`
}

// TopicList is GET /api/v1/topics: every topic of the stage, by name.
type TopicList struct {
	Topics []TopicState `json:"topics"`
}

// TopicState is one topic, as ls and describe show it.
type TopicState struct {
	Name string `json:"name"`
	// Listed: in the stage's topic list in Consul (created by `sluice
	// topics create`), which relays that follow it serve. Registered: a
	// relay registered it in Redis (it relays it, or did).
	Listed     bool `json:"listed"`
	Registered bool `json:"registered"`
	// Partitions and Replication are Kafka's (0: the topic is not in
	// Kafka, or Kafka was not asked: ls without Kafka brokers).
	Partitions  int `json:"partitions"`
	Replication int `json:"replication"`
	// Kafka lists which of the topic's Kafka topics exist: the topic,
	// <topic>.retry, <topic>.dlq.
	Kafka   []string   `json:"kafka"`
	Created *time.Time `json:"created,omitempty"`
	// Relay is the holder of the topic's relay lock ("": none holds it).
	Relay string `json:"relay,omitempty"`
	// Describe only: the topic's jobs per state summed over the Redis
	// partitions.
	Queue *QueueState `json:"queue,omitempty"`
	// Problems says what keeps the topic from being served, with the fix.
	Problems []string `json:"problems,omitempty"`
}

// TopicCreated is POST /api/v1/topics' answer.
type TopicCreated struct {
	TopicState
	// Created lists the Kafka topics this call created (the others
	// existed already).
	CreatedKafka []string `json:"created_kafka"`
}

// TopicDeleted is DELETE /api/v1/topics/{name}'s answer.
type TopicDeleted struct {
	Name string `json:"name"`
	// DeletedKafka lists the Kafka topics deleted.
	DeletedKafka []string `json:"deleted_kafka"`
	// Unlisted: the topic left the stage's list; Unregistered: it left
	// the relays' registry in Redis.
	Unlisted     bool `json:"unlisted"`
	Unregistered bool `json:"unregistered"`
	// Left counts the jobs still in Redis (ready, delayed, running,
	// dead): kept, for workers that serve the topic and the dead set
	// commands (--force deletes with them there).
	Left int64 `json:"left"`
}
