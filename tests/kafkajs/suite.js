// KafkaJS (a Kafka client written in JavaScript, with its own protocol code) against a
// trio-broker: admin, an idempotent producer with gzip, a consumer group that commits, and
// transactions read back read_committed. test_kafkajs.py runs it and checks what it prints:
// one JSON object with everything it was told and everything it read.
//
//   node suite.js BOOTSTRAP PY_TOPIC PY_COUNT REPLICATION_FACTOR

'use strict'

const finish = require('./finish')
const { Kafka, logLevel, CompressionTypes } = require('kafkajs')

const [bootstrap, pyTopic, pyCountText, rfText] = process.argv.slice(2)
const pyCount = Number(pyCountText)
const replicationFactor = Number(rfText)
const kafka = new Kafka({
  clientId: 'kafkajs-interop',
  brokers: bootstrap.split(','),
  logLevel: logLevel.NOTHING,
  retry: { retries: 10, initialRetryTime: 100 },
})
const out = {}

// Read `count` messages of `topics` with a new group; returns them in arrival order.
async function consumeAll(groupId, topics, count, options = {}) {
  // Short fetch waits: a disconnect waits for the fetch in flight.
  const consumer = kafka.consumer({ groupId, maxWaitTimeInMs: 200, ...options })
  await consumer.connect()
  for (const topic of topics) await consumer.subscribe({ topic, fromBeginning: true })
  const got = []
  let done
  const finished = new Promise((resolve) => { done = resolve })
  await consumer.run({
    eachMessage: async ({ topic, partition, message }) => {
      got.push({
        topic,
        partition,
        offset: Number(message.offset),
        key: message.key === null ? null : message.key.toString(),
        value: message.value.toString(),
        headers: Object.fromEntries(
          Object.entries(message.headers || {}).map(([k, v]) => [k, v.toString()])),
      })
      if (got.length >= count) done()
    },
  })
  const timer = setTimeout(done, 60000)
  await finished
  clearTimeout(timer)
  // Nothing more should come: wait a moment for strays (a duplicate, an aborted record).
  await new Promise((resolve) => setTimeout(resolve, 1000))
  await consumer.disconnect() // commits what it consumed
  return got
}

async function main() {
  const admin = kafka.admin()
  await admin.connect()
  const cluster = await admin.describeCluster()
  out.brokers = cluster.brokers.map((b) => b.nodeId).sort()
  out.controller = cluster.controller

  // Admin: topics with replicas, their metadata, configs.
  out.created = await admin.createTopics({
    topics: [
      { topic: 'js-orders', numPartitions: 3, replicationFactor },
      { topic: 'js-tx', numPartitions: 1, replicationFactor },
    ],
    waitForLeaders: true,
  })
  const meta = await admin.fetchTopicMetadata({ topics: ['js-orders'] })
  out.partitions = meta.topics[0].partitions.map((p) => ({
    partition: p.partitionId, leader: p.leader, replicas: p.replicas, isr: p.isr,
  })).sort((a, b) => a.partition - b.partition)
  const configs = await admin.describeConfigs({
    resources: [{ type: 2, name: 'js-orders', configNames: ['cleanup.policy'] }],
    includeSynonyms: false,
  })
  out.cleanupPolicy = configs.resources[0].configEntries[0].configValue

  // An idempotent producer, gzip, keys and headers, acks=all.
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  out.sent = []
  for (let batch = 0; batch < 3; batch++) {
    const messages = []
    for (let i = batch * 100; i < (batch + 1) * 100; i++) {
      messages.push({ key: `k${i}`, value: `v${i}`, headers: { n: String(i) } })
    }
    const meta = await producer.send({
      topic: 'js-orders', acks: -1, compression: CompressionTypes.GZIP, messages,
    })
    out.sent.push(...meta.map((m) => ({
      partition: m.partition, errorCode: m.errorCode, baseOffset: Number(m.baseOffset),
    })))
  }
  await producer.disconnect()
  out.endOffsets = (await admin.fetchTopicOffsets('js-orders'))
    .map((p) => ({ partition: p.partition, high: Number(p.high), low: Number(p.low) }))
    .sort((a, b) => a.partition - b.partition)

  // A consumer group reads all of it and commits; the committed offsets are the ends.
  out.consumed = await consumeAll('js-group', ['js-orders'], 300)
  const committed = await admin.fetchOffsets({ groupId: 'js-group', topics: ['js-orders'] })
  out.committed = committed[0].partitions
    .map((p) => ({ partition: p.partition, offset: Number(p.offset) }))
    .sort((a, b) => a.partition - b.partition)
  const groups = await admin.describeGroups(['js-group'])
  out.groupState = groups.groups[0].state

  // What the Python side produced (confluent-kafka, gzip), read by KafkaJS.
  out.fromPython = await consumeAll('js-reader', [pyTopic], pyCount)

  // Transactions: committed, aborted, committed; with the consumer's offsets in the last.
  const txProducer = kafka.producer({
    transactionalId: 'js-tx-producer', idempotent: true, maxInFlightRequests: 1,
  })
  await txProducer.connect()
  for (const [name, count, commit] of [['a', 10, true], ['b', 10, false], ['c', 5, true]]) {
    const txn = await txProducer.transaction()
    const messages = []
    for (let i = 0; i < count; i++) messages.push({ value: `${name}${i}` })
    await txn.send({ topic: 'js-tx', messages })
    if (name === 'c') {
      await txn.sendOffsets({
        consumerGroupId: 'js-tx-group',
        topics: [{ topic: 'js-orders', partitions: [{ partition: 0, offset: '7' }] }],
      })
    }
    if (commit) await txn.commit()
    else await txn.abort()
  }
  await txProducer.disconnect()
  // KafkaJS reads read_committed by default.
  out.committedTx = await consumeAll('js-tx-reader', ['js-tx'], 15)
  const txOffsets = await admin.fetchOffsets({ groupId: 'js-tx-group', topics: ['js-orders'] })
  out.txGroupOffsets = txOffsets[0].partitions
    .map((p) => ({ partition: p.partition, offset: Number(p.offset) }))
    .sort((a, b) => a.partition - b.partition)

  // More of the admin API: partitions, configs, records, offsets by time, groups.
  await admin.createPartitions({ topicPartitions: [{ topic: 'js-tx', count: 2 }] })
  const txMeta = await admin.fetchTopicMetadata({ topics: ['js-tx'] })
  out.txPartitions = txMeta.topics[0].partitions.length
  await admin.alterConfigs({
    resources: [{ type: 2, name: 'js-orders', configEntries: [{ name: 'retention.ms', value: '7200000' }] }],
  })
  const altered = await admin.describeConfigs({
    resources: [{ type: 2, name: 'js-orders', configNames: ['retention.ms'] }],
    includeSynonyms: false,
  })
  out.retentionMs = altered.resources[0].configEntries[0].configValue
  await admin.deleteTopicRecords({ topic: 'js-orders', partitions: [{ partition: 0, offset: '5' }] })
  out.afterDeleteRecords = (await admin.fetchTopicOffsets('js-orders'))
    .map((p) => ({ partition: p.partition, low: Number(p.low), high: Number(p.high) }))
    .sort((a, b) => a.partition - b.partition)
  out.byTimestamp = (await admin.fetchTopicOffsetsByTimestamp('js-orders', 0))
    .map((p) => ({ partition: p.partition, offset: Number(p.offset) }))
    .sort((a, b) => a.partition - b.partition)
  out.groups = (await admin.listGroups()).groups.map((g) => g.groupId).sort()
  await admin.setOffsets({ groupId: 'js-group', topic: 'js-orders', partitions: [{ partition: 1, offset: '3' }] })
  const moved = await admin.fetchOffsets({ groupId: 'js-group', topics: ['js-orders'] })
  out.movedOffset = Number(moved[0].partitions.find((p) => p.partition === 1).offset)
  out.deletedGroups = (await admin.deleteGroups(['js-reader'])).map((g) => [g.groupId, g.errorCode])
  out.groupsAfterDelete = (await admin.listGroups()).groups.map((g) => g.groupId).sort()

  await admin.deleteTopics({ topics: ['js-tx'] })
  out.topicsAfterDelete = (await admin.listTopics()).filter((t) => t.startsWith('js-')).sort()
  await admin.disconnect()
}

finish(main, out)
