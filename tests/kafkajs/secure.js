// KafkaJS over SASL_SSL: a wrong password is refused, the right one produces and consumes.
// test_kafkajs.py runs it and checks the JSON it prints.
//
//   node secure.js BOOTSTRAP MECHANISM USER PASSWORD CA_PEM

'use strict'

const fs = require('fs')
const finish = require('./finish')
const { Kafka, logLevel } = require('kafkajs')

const [bootstrap, mechanism, username, password, caPath] = process.argv.slice(2)
const out = {}

function client(pw) {
  return new Kafka({
    clientId: 'kafkajs-secure',
    brokers: [bootstrap],
    logLevel: logLevel.NOTHING,
    ssl: { ca: [fs.readFileSync(caPath, 'utf-8')] },
    sasl: { mechanism: mechanism.toLowerCase(), username, password: pw },
    retry: { retries: 1, initialRetryTime: 100 },
  })
}

async function main() {
  const refused = client(`not-${password}`).admin()
  try {
    await refused.connect()
    await refused.listTopics()
    out.wrongPassword = 'accepted'
  } catch (err) {
    out.wrongPassword = err.name
  }
  await refused.disconnect().catch(() => {})

  const kafka = client(password)
  const admin = kafka.admin()
  await admin.connect()
  out.created = await admin.createTopics({ topics: [{ topic: 'js-secure', numPartitions: 1 }] })
  const producer = kafka.producer()
  await producer.connect()
  const messages = []
  for (let i = 0; i < 20; i++) messages.push({ key: `k${i}`, value: `secret-${i}` })
  const sent = await producer.send({ topic: 'js-secure', acks: -1, messages })
  out.sentErrors = sent.map((m) => m.errorCode)
  await producer.disconnect()

  const consumer = kafka.consumer({ groupId: 'js-secure-group', maxWaitTimeInMs: 200 })
  await consumer.connect()
  await consumer.subscribe({ topic: 'js-secure', fromBeginning: true })
  out.consumed = []
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out consuming')), 60000)
    consumer.run({
      eachMessage: async ({ message }) => {
        out.consumed.push([Number(message.offset), message.value.toString()])
        if (out.consumed.length >= 20) { clearTimeout(timer); resolve() }
      },
    }).catch(reject)
  })
  await consumer.disconnect()
  await admin.disconnect()
}

finish(main, out)
