// kafkajs over SASL_SSL (SCRAM) with the test CA: produce N records to a topic, consume them back,
// print {"produced": N, "consumed": [...values]} as the last stdout line.
// Usage: node sasl_ssl.js '{"brokers": [...], "ca": "...pem", "mechanism": "scram-sha-512",
//                           "username": "...", "password": "...", "topic": "...", "count": 5}'
const fs = require('fs');
const { Kafka, logLevel } = require('kafkajs');

async function main() {
  const args = JSON.parse(process.argv[2]);
  const kafka = new Kafka({
    clientId: 'kbroker-kafkajs-sasl', brokers: args.brokers, logLevel: logLevel.NOTHING,
    ssl: { ca: [fs.readFileSync(args.ca, 'utf-8')], servername: 'localhost' },
    sasl: { mechanism: args.mechanism, username: args.username, password: args.password },
    connectionTimeout: 10000, authenticationTimeout: 10000,
  });
  const producer = kafka.producer();
  await producer.connect();
  const messages = [];
  for (let i = 0; i < args.count; i++) messages.push({ key: `k${i}`, value: `kafkajs-${i}` });
  await producer.send({ topic: args.topic, messages });
  await producer.disconnect();

  const consumer = kafka.consumer({ groupId: `${args.topic}-group` });
  await consumer.connect();
  await consumer.subscribe({ topic: args.topic, fromBeginning: true });
  const got = [];
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${got.length} records consumed`)), 60000);
    consumer.run({
      eachMessage: async ({ message }) => {
        got.push(message.value.toString());
        if (got.length >= args.count) { clearTimeout(timer); resolve(); }
      },
    }).catch(reject);
  });
  await consumer.disconnect();
  console.log(JSON.stringify({ produced: args.count, consumed: got }));
}

main().catch((e) => { console.error(e.stack || String(e)); process.exit(1); });
