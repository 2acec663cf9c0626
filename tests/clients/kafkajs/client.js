#!/usr/bin/env node
// The kafkajs client (kafkajs 2.2.4), driven from the Rust integration tests
// like the Python scripts and JavaClient.java beside it: the same flags and
// the same JSON shapes (see ../README.md), one JSON object on the last stdout
// line; exit 0 done, 1 fell short (JSON still printed), 2 bad arguments,
// 3 crash (stack on stderr).
//
//   node client.js produce --bootstrap B --topic T --count N [--start S]
//       [--compression none|gzip|snappy|lz4|zstd] [--acks 0|1|all]
//       [--idempotent | --no-idempotent] [--keyed] [--partition P]
//       [--value-size N] [--value-prefix P] [--linger-ms MS] [--timeout S]
//   node client.js consume --bootstrap B --topic T --expect N
//       (--group G [--members M] [--commit] | --assign)
//       [--linger S] [--records] [--timeout S]
//   node client.js admin --bootstrap B create|describe|delete|offsets
//       [--topic T] [--partitions P] [--replication-factor R]
//       [--config k=v ...] [--timeout S] [--allow-error]
//   node client.js version      (kafkajs and codec versions, one line)
//
// Every command takes -X scope.option=value (repeatable): extra kafkajs
// options, scope = client (new Kafka), producer, consumer, admin, send
// (producer.send) or run (consumer.run); the value is parsed as JSON when it
// parses, e.g. -X client.logLevel=5 (debug logs on stderr),
// -X consumer.maxWaitTimeInMs=100.
//
// package.json and package-lock.json beside this file pin the packages;
// install them elsewhere and point NODE_PATH there (modules resolve the usual
// way), e.g. from the repository root:
//   mkdir -p .peers/node && cp tests/clients/kafkajs/package*.json .peers/node/
//   npm ci --prefix .peers/node --no-audit --no-fund
//   NODE_PATH=$PWD/.peers/node/node_modules node tests/clients/kafkajs/client.js ...
//
// How it differs from the librdkafka scripts, because kafkajs works so:
// - produce: records are sent in chunks (one producer.send per chunk, in
//   order); each record's offset is its partition's baseOffset in the
//   response plus its index among that partition's records of the chunk.
//   kafkajs has no linger: --linger-ms is accepted and ignored. The
//   partitioner is kafkajs' DefaultPartitioner (murmur2, as Java's for keyed
//   records; round robin for unkeyed ones).
// - consume: each member commits what it consumed (next offset) after every
//   batch, before kafkajs heartbeats and so before it can rejoin a
//   rebalance; kafkajs has no manual assignment, so --assign is one consumer
//   in a throwaway group (unique id, from the beginning, no commits).
//   --expect 0 counts as reached at the start (then --linger applies).
// - Codecs: gzip is kafkajs' own; snappy kafkajs-snappy (snappyjs, pure JS);
//   lz4 lz4-napi (LZ4 frames, a prebuilt binary from the registry, no
//   compiler); zstd @bokuweb/zstd-wasm to compress (WebAssembly) and fzstd
//   (pure JS) to decompress. A codec whose package does not load: produce
//   exits 2 naming it; consuming such batches fails with kafkajs' error.
'use strict'

const crypto = require('crypto')

const T0 = process.hrtime.bigint()
const elapsed = () => Math.round(Number(process.hrtime.bigint() - T0) / 1e6) / 1000
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// --- arguments -----------------------------------------------------------------

const USAGE = `usage:
  node client.js produce --bootstrap B --topic T --count N [--start S]
      [--compression none|gzip|snappy|lz4|zstd] [--acks 0|1|all]
      [--idempotent | --no-idempotent] [--keyed] [--partition P]
      [--value-size N] [--value-prefix P] [--linger-ms MS] [--timeout S]
  node client.js consume --bootstrap B --topic T --expect N
      (--group G [--members M] [--commit] | --assign)
      [--linger S] [--records] [--timeout S]
  node client.js admin --bootstrap B create|describe|delete|offsets
      [--topic T] [--partitions P] [--replication-factor R]
      [--config k=v ...] [--timeout S] [--allow-error]
  node client.js version
  every command: -X scope.option=value (scope: client, producer, consumer,
      admin, send, run; the value as JSON when it parses)`

class UsageError extends Error {}

function usage(why) {
  throw new UsageError(why)
}

const FLAGS = {
  produce: ['--idempotent', '--no-idempotent', '--keyed'],
  consume: ['--assign', '--commit', '--records'],
  admin: ['--allow-error'],
}
const VALUES = {
  produce: ['--bootstrap', '--topic', '--count', '--start', '--compression', '--acks', '--partition',
    '--value-size', '--value-prefix', '--linger-ms', '--timeout'],
  consume: ['--bootstrap', '--topic', '--group', '--expect', '--timeout', '--members', '--linger'],
  admin: ['--bootstrap', '--topic', '--partitions', '--replication-factor', '--timeout'],
}
const REPEATED = { admin: ['--config'] }
const SCOPES = ['client', 'producer', 'consumer', 'admin', 'send', 'run']

class Args {
  constructor(command, argv) {
    this.values = new Map()
    this.repeated = new Map()
    this.flags = new Set()
    this.positional = []
    this.extra = Object.fromEntries(SCOPES.map(s => [s, {}]))
    const flags = FLAGS[command]
    const values = VALUES[command]
    const repeated = REPEATED[command] || []
    for (let i = 0; i < argv.length; i++) {
      let a = argv[i]
      let inline = null
      if (a.startsWith('--') && a.includes('=')) {
        inline = a.slice(a.indexOf('=') + 1)
        a = a.slice(0, a.indexOf('='))
      }
      const next = () => {
        if (inline !== null) return inline
        if (i + 1 >= argv.length) usage(`${a} needs a value`)
        return argv[++i]
      }
      if (a === '-h' || a === '--help') {
        process.stdout.write(USAGE + '\n')
        process.exit(0)
      } else if (a === '-X') {
        this.addExtra(next())
      } else if (a.startsWith('-X') && a.length > 2) {
        this.addExtra(a.slice(2))
      } else if (flags.includes(a)) {
        if (inline !== null) usage(`${a} takes no value`)
        this.flags.add(a)
      } else if (values.includes(a)) {
        this.values.set(a, next())
      } else if (repeated.includes(a)) {
        if (!this.repeated.has(a)) this.repeated.set(a, [])
        this.repeated.get(a).push(next())
      } else if (a.startsWith('-') && a !== '-') {
        usage(`unknown option ${a} for ${command}`)
      } else {
        this.positional.push(a)
      }
    }
  }

  addExtra(kv) {
    const eq = kv.indexOf('=')
    const dot = kv.indexOf('.')
    if (eq < 0 || dot < 0 || dot > eq) usage(`bad -X option ${kv}: expected scope.option=value`)
    const scope = kv.slice(0, dot)
    if (!SCOPES.includes(scope)) usage(`bad -X option ${kv}: scope must be one of ${SCOPES.join(', ')}`)
    const raw = kv.slice(eq + 1)
    let value = raw
    try {
      value = JSON.parse(raw)
    } catch (_) {}
    this.extra[scope][kv.slice(dot + 1, eq)] = value
  }

  get(name, dflt) {
    const v = this.values.get(name)
    if (v === undefined) {
      if (dflt === undefined) usage(`${name} is required`)
      return dflt
    }
    return v
  }

  int(name, dflt) {
    const v = this.values.get(name)
    if (v === undefined) {
      if (dflt === undefined) usage(`${name} is required`)
      return dflt
    }
    if (!/^-?\d+$/.test(v)) usage(`${name}: not an integer: ${v}`)
    return parseInt(v, 10)
  }

  secs(name, dflt) {
    const v = this.values.get(name)
    if (v === undefined) return dflt
    const n = Number(v)
    if (v.trim() === '' || !Number.isFinite(n)) usage(`${name}: not a number: ${v}`)
    return n
  }

  has(flag) {
    return this.flags.has(flag)
  }

  choice(name, dflt, choices) {
    const v = this.get(name, dflt)
    if (!choices.includes(v)) usage(`${name}: '${v}' is not one of ${choices.join(', ')}`)
    return v
  }
}

// --- JSON output -----------------------------------------------------------------

// Like Python's json.dumps(sort_keys=True): sorted keys, ', ' and ': '
// separators, non-ASCII escaped.
function pyjson(v) {
  if (v === null || v === undefined) return 'null'
  switch (typeof v) {
    case 'number':
      return Number.isFinite(v) ? String(v) : 'null'
    case 'bigint':
      return v.toString()
    case 'boolean':
      return v ? 'true' : 'false'
    case 'string':
      return JSON.stringify(v).replace(/[\u007f-\uffff]/g, c => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'))
    default:
      break
  }
  if (Array.isArray(v)) return '[' + v.map(pyjson).join(', ') + ']'
  if (v instanceof Map) v = Object.fromEntries(v)
  return '{' + Object.keys(v).sort().map(k => pyjson(k) + ': ' + pyjson(v[k])).join(', ') + '}'
}

/** Prints the result as the last stdout line and exits (0 if ok, else 1). */
function emit(result, ok, message) {
  if (message) process.stderr.write(message + '\n')
  process.stdout.write(pyjson(result) + '\n', () => process.exit(ok ? 0 : 1))
  return new Promise(() => {}) // never resolves: the process exits
}

// --- shared helpers ----------------------------------------------------------------

function valueFor(prefix, i, size) {
  const v = `${prefix}-${i}`
  return size && v.length < size ? v + '.'.repeat(size - v.length) : v
}

/** sha256 over the sorted, de-duplicated values joined by newlines. */
function valuesSha(values) {
  const sorted = Array.from(new Set(values)).sort(codePointCompare)
  return crypto.createHash('sha256').update(sorted.join('\n'), 'utf8').digest('hex')
}

// Python sorts strings by code point; JS by UTF-16 unit. Same for the BMP
// without surrogates, i.e. every value these tests use, but be exact.
function codePointCompare(a, b) {
  if (a === b) return 0
  const x = Array.from(a)
  const y = Array.from(b)
  for (let i = 0; i < Math.min(x.length, y.length); i++) {
    const d = x[i].codePointAt(0) - y[i].codePointAt(0)
    if (d !== 0) return d
  }
  return x.length - y.length
}

/** "NAME: message" with Kafka's error name, like the Python scripts. */
function errText(e) {
  let cur = e
  for (let depth = 0; cur && depth < 10; depth++) {
    if (cur.name === 'KafkaJSAggregateError' && Array.isArray(cur.errors) && cur.errors.length > 0) {
      cur = cur.errors[0]
      continue
    }
    if (typeof cur.type === 'string' && /^[A-Z0-9_]+$/.test(cur.type)) return `${cur.type}: ${cur.message}`
    const inner = cur.cause || cur.originalError
    if (inner && inner !== cur && typeof inner === 'object') {
      cur = inner
      continue
    }
    break
  }
  const last = cur || e
  if (last && typeof last === 'object') return `${last.name || 'Error'}: ${last.message}`
  return String(e)
}

function topError(errors) {
  return Array.from(new Set(errors)).sort().slice(0, 20)
}

/** Resolves with p's value, or with `onTimeout` after ms. */
function withTimeout(p, ms, onTimeout) {
  let timer
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise(resolve => {
      timer = setTimeout(() => resolve(onTimeout), Math.max(0, ms))
    }),
  ])
}

function addOffset(offsets, partition, offset) {
  const k = String(partition)
  const lohi = offsets[k]
  if (!lohi) offsets[k] = [offset, offset]
  else offsets[k] = [Math.min(lohi[0], offset), Math.max(lohi[1], offset)]
}

// --- kafkajs, its codecs and logging -------------------------------------------------

let kafkajs
try {
  kafkajs = require('kafkajs')
} catch (e) {
  process.stderr.write(`kafkajs client: cannot load kafkajs (${e.message.split('\n')[0]}): install ` +
    'package.json + package-lock.json beside this file with npm ci and point NODE_PATH at its node_modules\n')
  process.exit(3)
}
const KAFKAJS_VERSION = require('kafkajs/package.json').version
const { Kafka, CompressionTypes, CompressionCodecs, Partitioners, logLevel, ConfigResourceTypes } = kafkajs

function pkgVersion(name) {
  try {
    return require(`${name}/package.json`).version
  } catch (_) {}
  try {
    // A package whose "exports" hide package.json: walk up from its main file.
    const path = require('path')
    for (let dir = path.dirname(require.resolve(name)); dir !== path.dirname(dir); dir = path.dirname(dir)) {
      try {
        const pkg = JSON.parse(require('fs').readFileSync(path.join(dir, 'package.json'), 'utf8'))
        if (pkg.name === name) return pkg.version
      } catch (_) {}
    }
  } catch (_) {}
  return '?'
}

// codec name -> { type, lib } for the loaded ones; -> error text for the others.
const CODECS = { none: { type: CompressionTypes.None, lib: '' }, gzip: { type: CompressionTypes.GZIP, lib: 'built in' } }
const CODEC_FAILURES = {}

function loadCodec(name, type, load) {
  try {
    const { codec, lib } = load()
    CompressionCodecs[type] = codec
    CODECS[name] = { type, lib }
  } catch (e) {
    CODEC_FAILURES[name] = `${e.code || e.name}: ${e.message.split('\n')[0]}`
  }
}

loadCodec('snappy', CompressionTypes.Snappy, () => ({
  codec: require('kafkajs-snappy'),
  lib: `kafkajs-snappy ${pkgVersion('kafkajs-snappy')} (snappyjs ${pkgVersion('snappyjs')})`,
}))
loadCodec('lz4', CompressionTypes.LZ4, () => {
  const lz4 = require('lz4-napi')
  // Loads the platform's binary now, so a missing one shows here.
  lz4.decompressFrameSync(lz4.compressFrameSync(Buffer.from('lz4')))
  return {
    codec: () => ({
      compress: async encoder => lz4.compressFrame(encoder.buffer),
      decompress: async buffer => lz4.decompressFrame(buffer),
    }),
    lib: `lz4-napi ${pkgVersion('lz4-napi')}`,
  }
})
loadCodec('zstd', CompressionTypes.ZSTD, () => {
  const wasm = require('@bokuweb/zstd-wasm')
  // fzstd decodes any frame: no content size (Java's zstd-jni streams) and
  // several frames too, which the wasm package's simple API cannot.
  const fzstd = require('fzstd')
  let ready = null
  return {
    codec: () => ({
      compress: async encoder => {
        if (!ready) ready = wasm.init()
        await ready
        return Buffer.from(wasm.compress(encoder.buffer, 3))
      },
      decompress: async buffer => Buffer.from(fzstd.decompress(buffer)),
    }),
    lib: `@bokuweb/zstd-wasm ${pkgVersion('@bokuweb/zstd-wasm')} + fzstd ${pkgVersion('fzstd')}`,
  }
})

const LEVEL_NAMES = { 0: 'NOTHING', 1: 'ERROR', 2: 'WARN', 4: 'INFO', 5: 'DEBUG' }

// kafkajs logs go to stderr only, one line each.
const logCreator = () => ({ namespace, level, log }) => {
  const { message, timestamp, logger, ...rest } = log
  let extra = ''
  try {
    extra = Object.keys(rest).length ? ' ' + JSON.stringify(rest) : ''
  } catch (_) {}
  process.stderr.write(`${timestamp} kafkajs ${LEVEL_NAMES[level] || level} ${namespace}: ${message}${extra}\n`)
}

function makeKafka(a, clientId, more = {}) {
  return new Kafka({
    clientId,
    brokers: a.get('--bootstrap').split(',').map(s => s.trim()).filter(Boolean),
    logLevel: logLevel.WARN,
    logCreator,
    ...more,
    ...a.extra.client,
  })
}

// --- produce ---------------------------------------------------------------------

async function produce(a) {
  const topic = a.get('--topic')
  const count = a.int('--count')
  if (count < 0) usage('--count must be >= 0')
  const start = a.int('--start', 0)
  const compression = a.choice('--compression', 'none', ['none', 'gzip', 'snappy', 'lz4', 'zstd'])
  const acksName = a.choice('--acks', 'all', ['0', '1', 'all', '-1'])
  const acks = acksName === 'all' ? -1 : parseInt(acksName, 10)
  const idempotent = a.has('--idempotent')
  const keyed = a.has('--keyed')
  const partition = a.values.has('--partition') ? a.int('--partition') : null
  const size = a.int('--value-size', 0)
  const prefix = a.get('--value-prefix', compression)
  a.int('--linger-ms', 5) // accepted for parity; kafkajs does not linger
  const timeout = a.secs('--timeout', 60)
  if (idempotent && acks !== -1) usage('--idempotent needs --acks all (kafkajs refuses idempotence without acks=-1)')
  if (!CODECS[compression]) {
    usage(`compression ${compression} is not available: ${CODEC_FAILURES[compression] || 'no codec'} ` +
      `(working: ${Object.keys(CODECS).join(', ')})`)
  }

  const kafka = makeKafka(a, 'kafkajs_produce')
  // kafkajs' DefaultPartitioner (Java's murmur2 for keys, round robin
  // without), pinning its choice on the message: a retried send keeps it, and
  // the offsets below know each record's partition.
  const createPartitioner = () => {
    const inner = Partitioners.DefaultPartitioner()
    return args => {
      const p = inner(args)
      args.message.partition = p
      return p
    }
  }
  const producer = kafka.producer({
    createPartitioner,
    idempotent,
    ...(idempotent ? { maxInFlightRequests: 1 } : {}),
    ...a.extra.producer,
  })

  const delivered = [] // [partition, offset|null, value]
  const errors = []
  let failed = 0
  const deadline = Date.now() + (timeout + 5) * 1000
  const sendTimeout = Math.max(1000, Math.min(30000, Math.round(timeout * 1000)))

  const connectError = await withTimeout(
    producer.connect().then(() => null, e => errText(e)),
    deadline - Date.now(),
    `connect: timed out after ${timeout + 5} s`
  )
  if (connectError === null) {
    // Chunks of at most 1000 records and about 512 KiB of values.
    const perChunk = Math.max(1, Math.min(1000, Math.floor((512 * 1024) / Math.max(size, prefix.length + 8))))
    for (let first = start; first < start + count; first += perChunk) {
      const last = Math.min(start + count, first + perChunk)
      const messages = []
      for (let i = first; i < last; i++) {
        const m = { value: valueFor(prefix, i, size) }
        if (keyed) m.key = `k${i % 16}`
        if (partition !== null) m.partition = partition
        messages.push(m)
      }
      const sent = producer
        .send({ topic, acks, timeout: sendTimeout, compression: CODECS[compression].type, messages, ...a.extra.send })
        .then(r => ({ r }), e => ({ e }))
      const out = await withTimeout(sent, deadline - Date.now(), null)
      if (out === null) break // out of time: the rest stays undelivered
      if (out.e) {
        const text = errText(out.e)
        for (let j = 0; j < messages.length; j++) errors.push(text)
        failed += messages.length
        continue
      }
      const base = new Map()
      for (const meta of out.r || []) {
        if (meta.topicName === topic && meta.baseOffset !== undefined && meta.baseOffset !== null) {
          base.set(Number(meta.partition), BigInt(meta.baseOffset))
        }
      }
      const index = new Map()
      for (const m of messages) {
        const p = Number(m.partition)
        const k = index.get(p) || 0
        index.set(p, k + 1)
        const b = base.get(p)
        const off = acks !== 0 && b !== undefined && b >= 0n ? Number(b + BigInt(k)) : null
        delivered.push([p, off, m.value])
      }
      if (Date.now() >= deadline) break
    }
  } else {
    // Nothing was sent: every record failed, as librdkafka's delivery reports say.
    for (let j = 0; j < count; j++) errors.push(connectError)
    failed = count
  }
  await withTimeout(producer.disconnect().catch(() => {}), 5000)

  const partitions = {}
  const offsets = {}
  for (const [p, off] of delivered) {
    partitions[String(p)] = (partitions[String(p)] || 0) + 1
    if (off !== null && off >= 0) addOffset(offsets, p, off)
  }
  const result = {
    delivered: delivered.length,
    count,
    undelivered: count - delivered.length - failed,
    errors: topError(errors),
    error_count: errors.length,
    partitions,
    offsets,
    values_sha: valuesSha(delivered.map(d => d[2])),
    elapsed_s: elapsed(),
    client: `kafkajs ${KAFKAJS_VERSION}`,
  }
  const ok = delivered.length === count
  return emit(result, ok,
    ok ? null : `kafkajs produce: delivered ${delivered.length} of ${count} (${JSON.stringify(topError(errors).slice(0, 3))})`)
}

// --- consume ---------------------------------------------------------------------

async function consume(a) {
  const topic = a.get('--topic')
  const expect = a.int('--expect')
  const assign = a.has('--assign')
  const group = a.get('--group', null)
  if (!assign && group === null) usage('--group is required unless --assign')
  const members = assign ? 1 : a.int('--members', 1)
  if (members < 1) usage('--members must be >= 1')
  const commit = !assign && a.has('--commit')
  const timeout = a.secs('--timeout', 60)
  const linger = a.secs('--linger', 0)
  const groupId = assign
    ? `kafkajs_consume-assign-${process.pid}-${Date.now()}-${crypto.randomBytes(4).toString('hex')}`
    : group
  const t0 = Date.now() - elapsed() * 1000

  const seen = new Map() // "p:o" -> [p, o, key, value]
  let received = 0
  const byMember = {}
  let inOrder = true
  const violations = []
  const errors = []
  let done = false
  let reachedAt = expect <= 0 ? Date.now() : null
  const states = []

  const startMember = async idx => {
    const kafka = makeKafka(a, `kafkajs_consume-${idx}`)
    const consumer = kafka.consumer({
      groupId,
      sessionTimeout: 10000,
      heartbeatInterval: 1000,
      maxWaitTimeInMs: 500,
      allowAutoTopicCreation: false,
      ...a.extra.consumer,
    })
    const st = { idx, consumer, consumed: new Map(), committed: new Map(), last: new Map(), count: 0, dead: false, active: 0 }
    states.push(st)
    byMember[String(idx)] = 0

    const commitConsumed = async parts => {
      const offs = []
      for (const [p, o] of st.consumed) {
        if ((parts === undefined || parts.includes(p)) && st.committed.get(p) !== o) {
          offs.push({ topic, partition: p, offset: String(o) })
        }
      }
      if (!commit || offs.length === 0) return
      try {
        await consumer.commitOffsets(offs)
        for (const { partition, offset } of offs) st.committed.set(partition, Number(offset))
      } catch (e) {
        errors.push(`commit: ${errText(e)}`)
      }
    }
    st.commitConsumed = commitConsumed

    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      // A (re)assignment: a partition may start over from its commit, and
      // what this member consumed of a partition it lost is not its to commit.
      const parts = (payload.memberAssignment && payload.memberAssignment[topic]) || []
      for (const p of parts) st.last.delete(p)
      for (const p of Array.from(st.consumed.keys())) {
        if (!parts.includes(p)) {
          st.consumed.delete(p)
          st.committed.delete(p)
        }
      }
    })
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      errors.push(`member ${idx}: ${errText(payload.error)}${payload.restart ? ' (restarting)' : ''}`)
      if (!payload.restart) st.dead = true
    })

    const handleBatch = async batch => {
      const p = batch.partition
      for (const m of batch.messages) {
        const off = Number(m.offset)
        const prev = st.last.get(p)
        if (prev !== undefined && off <= prev) {
          inOrder = false
          if (violations.length < 10) violations.push([p, prev, off])
        }
        st.last.set(p, off)
        st.consumed.set(p, off + 1)
        st.count++
        received++
        byMember[String(idx)] = st.count
        const k = `${p}:${off}`
        if (!seen.has(k)) {
          seen.set(k, [p, off, m.key == null ? null : m.key.toString('utf8'),
            m.value == null ? null : m.value.toString('utf8')])
        }
        if (seen.size >= expect && reachedAt === null) reachedAt = Date.now()
      }
      // Commit before kafkajs heartbeats (after this batch) and so before it
      // may rejoin and hand the partition to another member.
      await commitConsumed([p])
    }

    try {
      await consumer.connect()
      await consumer.subscribe({ topics: [topic], fromBeginning: true })
      await consumer.run({
        autoCommit: false,
        ...a.extra.run,
        eachBatch: async ({ batch }) => {
          if (done) return
          st.active++
          try {
            await handleBatch(batch)
          } finally {
            st.active--
          }
        },
      })
    } catch (e) {
      errors.push(assign ? `no partitions for ${topic}: ${errText(e)}` : `member ${idx}: ${errText(e)}`)
      st.dead = true
    }
  }

  for (let i = 0; i < members; i++) startMember(i)

  const deadline = t0 + timeout * 1000
  while (Date.now() < deadline) {
    if (reachedAt !== null && Date.now() >= reachedAt + linger * 1000) break
    if (states.length === members && states.every(s => s.dead)) break
    await sleep(50)
  }
  done = true
  // Let batches in progress finish (and commit) while the consumers still
  // run: kafkajs drops commits silently once a consumer is stopping.
  for (const until = Date.now() + 10000; Date.now() < until && states.some(s => s.active > 0);) await sleep(10)

  // Each member commits what it consumed once more, then stops (leaves).
  await Promise.all(states.map(async st => {
    if (!st.dead) await withTimeout(st.commitConsumed(), 10000)
  }))
  await Promise.all(states.map(st => withTimeout(st.consumer.stop().catch(e => errors.push(`stop: ${errText(e)}`)), 15000)))

  const committed = {}
  if (!assign) {
    const admin = makeKafka(a, 'kafkajs_consume-admin').admin()
    try {
      await withTimeout(
        (async () => {
          await admin.connect()
          const res = await admin.fetchOffsets({ groupId, topics: [topic] })
          for (const t of res) {
            if (t.topic !== topic) continue
            for (const { partition, offset } of t.partitions) {
              const o = Number(offset)
              committed[String(partition)] = o >= 0 ? o : null
            }
          }
        })(),
        15000
      )
    } catch (e) {
      errors.push(`committed: ${errText(e)}`)
    }
    await withTimeout(admin.disconnect().catch(() => {}), 5000)
  }
  await Promise.all(states.map(st => withTimeout(st.consumer.disconnect().catch(e => errors.push(`close: ${errText(e)}`)), 10000)))

  const sorted = Array.from(seen.values()).sort((x, y) => x[0] - y[0] || x[1] - y[1])
  const partitions = {}
  const offsets = {}
  for (const [p, o] of sorted) {
    partitions[String(p)] = (partitions[String(p)] || 0) + 1
    addOffset(offsets, p, o)
  }
  const result = {
    records: seen.size,
    received,
    duplicates: received - seen.size,
    expect,
    by_member: byMember,
    partitions,
    offsets,
    per_partition_in_order: inOrder,
    order_violations: violations,
    values_sha: valuesSha(sorted.map(r => r[3])),
    committed,
    errors: topError(errors),
    elapsed_s: elapsed(),
  }
  if (a.has('--records')) result.records_list = sorted
  const ok = seen.size >= expect
  return emit(result, ok, ok ? null : `kafkajs consume: saw ${seen.size} of ${expect} records in ${timeout} s`)
}

// --- admin -------------------------------------------------------------------------

const ERROR_MESSAGES = (() => {
  try {
    return Object.fromEntries(require('kafkajs/src/protocol/error').errorCodes.map(e => [e.type, e.message]))
  } catch (_) {
    return {}
  }
})()

function describeTopic(t) {
  const parts = [...t.partitions].sort((x, y) => x.partitionId - y.partitionId)
  return {
    partitions: parts.length,
    error: null,
    leaders: Object.fromEntries(parts.map(p => [String(p.partitionId), p.leader])),
    replicas: Object.fromEntries(parts.map(p => [String(p.partitionId), p.replicas || []])),
    isrs: Object.fromEntries(parts.map(p => [String(p.partitionId), p.isr || []])),
  }
}

async function admin(a) {
  if (a.positional.length !== 1) usage('admin needs one of create|describe|delete|offsets')
  const op = a.positional[0]
  if (!['create', 'describe', 'delete', 'offsets'].includes(op)) usage(`unknown admin operation ${op}`)
  const topic = a.get('--topic', null)
  if (op !== 'describe' && topic === null) usage(`${op} needs --topic`)
  const timeoutMs = Math.round(a.secs('--timeout', 30) * 1000)
  const numPartitions = a.int('--partitions', 8)
  const replicationFactor = a.int('--replication-factor', 1)
  const configEntries = (a.repeated.get('--config') || []).map(kv => {
    const eq = kv.indexOf('=')
    if (eq < 0) usage(`bad --config ${kv}: expected key=value`)
    return { name: kv.slice(0, eq), value: kv.slice(eq + 1) }
  })

  // Few, quick retries: a missing topic is an answer, not a reason to wait.
  const kafka = makeKafka(a, 'kafkajs_admin', { requestTimeout: timeoutMs })
  const adm = kafka.admin({ retry: { retries: 3, initialRetryTime: 100, maxRetryTime: 1000 }, ...a.extra.admin })
  const r = { op, topic, error: null }
  await adm.connect()

  if (op === 'create') {
    try {
      const topicSpec = { topic, numPartitions, replicationFactor }
      if (configEntries.length) topicSpec.configEntries = configEntries
      const created = await adm.createTopics({ topics: [topicSpec], timeout: timeoutMs, waitForLeaders: true })
      if (created === false) {
        r.error = `TOPIC_ALREADY_EXISTS: ${ERROR_MESSAGES.TOPIC_ALREADY_EXISTS || 'Topic with this name already exists'}`
      }
    } catch (e) {
      r.error = errText(e)
    }
  } else if (op === 'delete') {
    try {
      await adm.deleteTopics({ topics: [topic], timeout: timeoutMs })
    } catch (e) {
      r.error = errText(e)
    }
  } else if (op === 'describe') {
    const cl = await adm.describeCluster()
    r.cluster_id = cl.clusterId === undefined ? null : cl.clusterId
    r.controller_id = cl.controller === undefined ? null : cl.controller
    r.brokers = cl.brokers
      .map(b => ({ id: b.nodeId, host: b.host, port: b.port }))
      .sort((x, y) => x.id - y.id)
    const names = topic !== null ? [topic] : await adm.listTopics()
    const topics = {}
    const one = async name => {
      try {
        const md = await adm.fetchTopicMetadata({ topics: [name] })
        for (const t of md.topics) topics[t.name] = describeTopic(t)
      } catch (e) {
        topics[name] = { partitions: 0, error: errText(e), leaders: {}, replicas: {}, isrs: {} }
      }
    }
    if (names.length > 1) {
      try {
        const md = await adm.fetchTopicMetadata({ topics: names })
        for (const t of md.topics) topics[t.name] = describeTopic(t)
      } catch (_) {
        for (const name of names) await one(name) // one topic's error fails them all: ask one by one
      }
    } else {
      for (const name of names) await one(name)
    }
    r.topics = topics
    if (topic !== null) {
      if (topics[topic] && topics[topic].error) r.error = topics[topic].error
      r.configs = {}
      r.configs_error = null
      try {
        const res = await adm.describeConfigs({
          resources: [{ type: ConfigResourceTypes.TOPIC, name: topic }],
          includeSynonyms: false,
        })
        const configs = {}
        for (const resource of res.resources) {
          for (const c of resource.configEntries || []) configs[c.configName] = c.configValue
        }
        r.configs = configs
      } catch (e) {
        r.configs_error = errText(e)
      }
    }
  } else if (op === 'offsets') {
    r.earliest = {}
    r.latest = {}
    try {
      await adm.fetchTopicMetadata({ topics: [topic] }) // a missing topic fails here, without retries
      for (const p of await adm.fetchTopicOffsets(topic)) {
        r.earliest[String(p.partition)] = Number(p.low)
        r.latest[String(p.partition)] = Number(p.high)
      }
    } catch (e) {
      r.error = errText(e)
    }
  }
  await withTimeout(adm.disconnect().catch(() => {}), 5000)

  r.ok = r.error === null
  const ok = r.ok || a.has('--allow-error')
  return emit(r, ok, ok ? null : `kafkajs admin ${op}: ${r.error}`)
}

// --- main --------------------------------------------------------------------------

function version() {
  const codecs = ['gzip', 'snappy', 'lz4', 'zstd'].map(c =>
    CODECS[c] ? `${c}: ${CODECS[c].lib}` : `${c}: unavailable (${CODEC_FAILURES[c]})`)
  process.stdout.write(`kafkajs ${KAFKAJS_VERSION} (node ${process.version}; ${codecs.join('; ')})\n`)
  process.exit(0)
}

async function main() {
  const argv = process.argv.slice(2)
  if (argv.length < 1) usage('a command is needed')
  const command = argv[0]
  if (command === '-h' || command === '--help') {
    process.stdout.write(USAGE + '\n')
    process.exit(0)
  }
  if (command === 'version') return version()
  if (!FLAGS[command]) usage(`unknown command ${command}`)
  const a = new Args(command, argv.slice(1))
  if (command === 'produce') return produce(a)
  if (command === 'consume') return consume(a)
  return admin(a)
}

process.on('unhandledRejection', e => {
  // kafkajs leaves the odd promise unobserved while stopping: report, go on.
  process.stderr.write(`kafkajs client: unhandled rejection: ${(e && e.stack) || e}\n`)
})

main().catch(e => {
  if (e instanceof UsageError) {
    process.stderr.write(`kafkajs client: ${e.message} (--help for usage)\n`)
    process.exit(2)
  }
  process.stderr.write(`kafkajs client: crashed: ${(e && e.stack) || e}\n`)
  process.exit(3)
})
