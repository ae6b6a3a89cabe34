// KafkaJS's idempotent producer, acks=all, sending batches of 10 one after another until
// stdin closes; test_kafkajs.py kills the partition's leader meanwhile. Prints what was
// acknowledged (value, partition, offset) and what failed, as JSON; on stderr, a line
// `acked N` after each acknowledged batch.
//
//   node failover.js BOOTSTRAP TOPIC

'use strict'

const finish = require('./finish')
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, topic] = process.argv.slice(2)
const kafka = new Kafka({
  clientId: 'kafkajs-failover',
  brokers: bootstrap.split(','),
  logLevel: logLevel.NOTHING,
  // Long enough for a ZooKeeper session to expire and a new leader to be elected.
  retry: { retries: 30, initialRetryTime: 200, maxRetryTime: 2000 },
  requestTimeout: 10000,
})
const out = { acked: [], failed: [] }
let stopping = false
process.stdin.on('data', () => {})
process.stdin.on('end', () => { stopping = true })

async function main() {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  let n = 0
  while (!stopping) {
    const messages = []
    for (let i = 0; i < 10; i++) messages.push({ value: `js-${n++}`, partition: 0 })
    try {
      const [meta] = await producer.send({ topic, acks: -1, messages })
      const base = Number(meta.baseOffset)
      messages.forEach((m, i) => out.acked.push([m.value, 0, base + i]))
      process.stderr.write(`acked ${out.acked.length}\n`)
    } catch (err) {
      out.failed.push(...messages.map((m) => m.value))
      out.lastError = `${err.name}: ${err.message}`
    }
  }
  await producer.disconnect()
}

finish(main, out)
