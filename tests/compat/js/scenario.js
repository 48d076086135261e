// kafkajs side of the compat scenario, driven step by step by tests/compat/test_kafkajs.py.
//
//   node scenario.js <command> '<json args>'
//
// Commands: produce (create topic + produce records from a JSON file), inspect (offsets, offsets by
// timestamp, topic configs), consume (group consumer: every record of the topic, then the group's
// committed offsets), delete (delete topic).
// Each prints one JSON object on stdout; kafkajs' own log lines go to stderr.
'use strict';

const fs = require('fs');
const { Kafka, logLevel, Partitioners, ConfigResourceTypes } = require('kafkajs');

function stderrLogger() {
  return ({ namespace, level, label, log }) => {
    const { message, ...extra } = log;
    process.stderr.write(`[kafkajs ${label}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`);
  };
}

function client(args) {
  return new Kafka({
    clientId: 'kbroker-compat',
    brokers: [args.bootstrap],
    logLevel: logLevel.WARN,
    logCreator: stderrLogger,
    retry: { retries: 3, initialRetryTime: 100 },
  });
}

async function withAdmin(kafka, fn) {
  const admin = kafka.admin();
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.disconnect();
  }
}

async function produce(args) {
  const kafka = client(args);
  const records = JSON.parse(fs.readFileSync(args.recordsFile, 'utf8'));
  const created = await withAdmin(kafka, (admin) => admin.createTopics({
    waitForLeaders: true,
    topics: [{
      topic: args.topic,
      numPartitions: args.partitions,
      replicationFactor: 1,
      configEntries: Object.entries(args.configs || {}).map(([name, value]) => ({ name, value })),
    }],
  }));
  const producer = kafka.producer({
    createPartitioner: Partitioners.DefaultPartitioner,
    idempotent: !!args.idempotent,
    maxInFlightRequests: args.idempotent ? 1 : undefined,
  });
  await producer.connect();
  const acks = [];
  try {
    for (let i = 0; i < records.length; i += args.chunk || 1000) {
      const messages = records.slice(i, i + (args.chunk || 1000)).map((r) => ({
        key: r.key,
        value: r.value,
        headers: Object.fromEntries(r.headers),
        timestamp: String(r.timestamp),
      }));
      const meta = await producer.send({ topic: args.topic, acks: -1, messages });
      for (const m of meta) acks.push({ partition: m.partition, errorCode: m.errorCode, baseOffset: m.baseOffset });
    }
  } finally {
    await producer.disconnect();
  }
  return { created, acks };
}

async function inspect(args) {
  const kafka = client(args);
  return withAdmin(kafka, async (admin) => {
    const offsets = await admin.fetchTopicOffsets(args.topic);
    const byTimestamp = {};
    for (const ts of args.timestamps || []) {
      byTimestamp[ts] = await admin.fetchTopicOffsetsByTimestamp(args.topic, ts);
    }
    const configs = await admin.describeConfigs({
      includeSynonyms: false,
      resources: [{ type: ConfigResourceTypes.TOPIC, name: args.topic }],
    });
    const metadata = await admin.fetchTopicMetadata({ topics: [args.topic] });
    return { offsets, byTimestamp, configs, metadata };
  });
}

async function consume(args) {
  const kafka = client(args);
  const groupId = args.groupId || 'kbroker-compat-kafkajs';
  const consumer = kafka.consumer({ groupId });
  const consumed = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic: args.topic, fromBeginning: true });
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`consumed ${consumed.length} of ${args.expected} in time`)),
        args.timeoutMs || 20000);
      consumer.run({
        eachMessage: async ({ partition, message }) => {
          consumed.push({
            partition,
            offset: Number(message.offset),
            key: message.key === null ? null : message.key.toString('utf8'),
            value: message.value === null ? null : message.value.toString('utf8'),
            headers: Object.entries(message.headers || {}).map(([k, v]) => [k, v.toString('utf8')]),
            timestamp: Number(message.timestamp),
          });
          if (consumed.length >= args.expected) {
            clearTimeout(timer);
            resolve();
          }
        },
      }).catch(reject);
    });
  } finally {
    // Stops fetching, commits what was processed (autoCommit) and leaves the group. Anything
    // delivered after the last expected record is still in `consumed`, so duplicates would show.
    await consumer.disconnect();
  }
  const committed = await withAdmin(kafka, (admin) => admin.fetchOffsets({ groupId, topics: [args.topic] }));
  return { consumed, committed };
}

async function deleteTopic(args) {
  const kafka = client(args);
  return withAdmin(kafka, async (admin) => {
    await admin.deleteTopics({ topics: [args.topic] });
    return { topicsAfter: await admin.listTopics() };
  });
}

const commands = { produce, inspect, consume, delete: deleteTopic };

async function main() {
  const [command, rawArgs] = process.argv.slice(2);
  const fn = commands[command];
  if (!fn) throw new Error(`unknown command ${command}; expected one of ${Object.keys(commands)}`);
  const result = await fn(JSON.parse(rawArgs || '{}'));
  process.stdout.write(JSON.stringify(result) + '\n');
}

main().catch((err) => {
  process.stderr.write(`kafkajs scenario failed: ${err && err.stack ? err.stack : err}\n`);
  process.stdout.write(JSON.stringify({ error: String(err && err.message ? err.message : err) }) + '\n');
  process.exit(1);
});
