"""KIP-848 consumer groups (Kafka's `coordinator.group.modern.consumer`): membership by
ConsumerGroupHeartbeat, assignments computed by the broker (`assignors`), reconciled by
each member revoking before anything is assigned (`reconciliation`)."""
