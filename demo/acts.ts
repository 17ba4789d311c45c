/**
 * The demo's acts as plain functions of a timeline, so a test can run them in
 * virtual time and check their figures; `npm run demo` runs them in real time.
 * Each "replica" is its own Fastify instance with its own store (and its own
 * Redis connection), driven in process with `inject`. Act 5 counts what the
 * plugin publishes on `node:diagnostics_channel`, as a dashboard would.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel'
import { performance } from 'node:perf_hooks'
import Fastify, { type FastifyInstance } from 'fastify'
import jwt from '@fastify/jwt'
import type { Redis } from 'ioredis'
import tollgate, {
  memoryStore, redisStore, DECISION_CHANNEL, type DecisionMessage, type DecisionOutcome, type RedisStore, type Store
} from 'fastify-tollgate'

/** Time as the acts see it: milliseconds, and a way to wait. */
export interface Timeline {
  now: () => number
  sleep: (ms: number) => Promise<void>
}

export const realTime: Timeline = {
  now: () => performance.now(),
  sleep: async (ms) => { await new Promise((resolve) => setTimeout(resolve, ms)) }
}

/** Time that passes only when slept: acts run in a blink and give exact figures. */
export function virtualTime (): Timeline {
  let ms = 0
  return { now: () => ms, sleep: async (delta) => { ms += delta } }
}

/**
 * Runs `tick(elapsedMs)` every `tickMs` for `durationMs`, and `onTick` after each
 * (for live output). Ticks keep to the timeline even when one runs late.
 */
async function drive (time: Timeline, durationMs: number, tickMs: number, tick: (elapsedMs: number) => Promise<void>, onTick: (elapsedMs: number) => void): Promise<void> {
  const start = time.now()
  for (let at = 0; at < durationMs; at += tickMs) {
    await tick(at)
    onTick(at + tickMs)
    const wait = start + at + tickMs - time.now()
    if (wait > 0) await time.sleep(wait)
  }
}

async function status (app: FastifyInstance, remoteAddress: string, extra: { method?: 'GET' | 'POST', url?: string, headers?: Record<string, string> } = {}): Promise<number> {
  return (await app.inject({ method: extra.method ?? 'GET', url: extra.url ?? '/', remoteAddress, headers: extra.headers ?? {} })).statusCode
}

// ---------------------------------------------------------------- act 1

export interface BucketAct {
  binMs: number
  admitted: number[]
  refused: number[]
  capacity: number
  refillPerSecond: number
  durationMs: number
}

/** Act 1: B=20, R=5/s; the client sends 40 requests a second. */
export async function bucketAct (time: Timeline, onTick: (elapsedMs: number, act: BucketAct) => void = () => {}, durationMs = 4000): Promise<BucketAct> {
  const capacity = 20
  const refillPerSecond = 5
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ clock: time.now }), edge: { capacity, refillPerSecond } })
  app.get('/', async () => 'ok')
  const binMs = 250
  const bins = Math.ceil(durationMs / binMs)
  const act: BucketAct = { binMs, admitted: new Array<number>(bins).fill(0), refused: new Array<number>(bins).fill(0), capacity, refillPerSecond, durationMs }
  const tickMs = 50
  try {
    await drive(time, durationMs, tickMs, async (at) => {
      const count = 2 // per 50 ms: 40/s
      const bin = Math.floor(at / binMs)
      for (let i = 0; i < count; i++) {
        if (await status(app, '198.51.100.20') === 200) act.admitted[bin]!++
        else act.refused[bin]!++
      }
    }, (at) => { onTick(at, act) })
  } finally {
    await app.close()
  }
  return act
}

// ---------------------------------------------------------------- act 2 and 3

/** Stores for the replicas: in memory, or sharing one Redis. */
export type StoreFactory = (replica: number) => Store

export interface ReplicaRun {
  binMs: number
  /** Admitted per second, per bin, per replica. */
  replicas: number[][]
  /** Requests answered 5xx (must stay 0). */
  errors: number
  /** Per bin: 'shared' when every store used Redis, 'local' when any decided on its local share. */
  mode: Array<'shared' | 'local' | 'memory'>
}

export const REPLICA_QUOTA = { capacity: 20, refillPerSecond: 100 }
export const OFFERED_PER_SECOND = 600

/**
 * Three replicas, one client offering 600 requests a second, spread round robin
 * by the load balancer; each replica limits the client to 100/s (burst 20).
 * `events` run at their time (the outage act kills and restarts Redis).
 */
export async function replicaRun (
  time: Timeline,
  makeStore: StoreFactory,
  { durationMs = 4000, events = [], onTick = () => {} }: {
    durationMs?: number
    events?: Array<{ atMs: number, run: () => Promise<void> }>
    onTick?: (elapsedMs: number, run: ReplicaRun) => void
  } = {}
): Promise<ReplicaRun> {
  const stores: Store[] = [0, 1, 2].map(makeStore)
  const apps: FastifyInstance[] = []
  for (const store of stores) {
    const app = Fastify()
    await app.register(tollgate, { store, edge: REPLICA_QUOTA })
    app.get('/', async () => 'ok')
    apps.push(app)
  }
  const binMs = 500
  const bins = Math.ceil(durationMs / binMs)
  const run: ReplicaRun = { binMs, replicas: apps.map(() => new Array<number>(bins).fill(0)), errors: 0, mode: [] }
  const tickMs = 50
  const perTick = (OFFERED_PER_SECOND * tickMs) / 1000
  const pending = [...events].sort((a, b) => a.atMs - b.atMs)
  let tick = 0
  try {
    for (const app of apps) await app.ready()
    // Redis stores count live replicas by heartbeat (every 500 ms here); a replica
    // that started first has seen only itself. Wait, in real time, until all have
    // seen all, so a fallback share is quota × 1.2 / 3 from the start.
    const deadline = Date.now() + 3000
    const counting = (): boolean => stores.some((store) => ((store as Partial<RedisStore>).liveReplicas ?? stores.length) < stores.length)
    while (counting() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
    await drive(time, durationMs, tickMs, async (at) => {
      while (pending[0] !== undefined && pending[0].atMs <= at) await pending.shift()!.run()
      const bin = Math.floor(at / binMs)
      // Round robin, starting one replica further each tick: the replica asked first in
      // a turn reaches Redis first, so each gets that turn equally often.
      const first = tick++
      const answers = await Promise.all(Array.from({ length: perTick }, async (_, i) => {
        const replica = (first + i) % apps.length
        return [replica, await status(apps[replica]!, '203.0.113.7')] as const
      }))
      for (const [replica, code] of answers) {
        if (code === 200) run.replicas[replica]![bin]! += 1000 / binMs
        if (code >= 500) run.errors++
      }
      const states = stores.map((store) => (store as Partial<RedisStore>).state)
      const mode = states.every((state) => state === undefined) ? 'memory' : states.every((state) => state === 'closed') ? 'shared' : 'local'
      if (run.mode[bin] !== 'local') run.mode[bin] = mode
    }, (at) => { onTick(at, run) })
  } finally {
    for (const app of apps) await app.close()
  }
  return run
}

export const memoryStores = (time: Timeline): StoreFactory => () => memoryStore({ clock: time.now })

/**
 * Redis stores for the replicas, one client each. In virtual time the store is
 * given the timeline's clock; in real time it uses Redis's. `timeoutMs` (50)
 * bounds each call before a store falls back to its local share.
 */
export function redisStores (time: Timeline, connect: () => Redis, timeoutMs = 50): StoreFactory {
  return () => redisStore({
    client: connect(),
    clock: time === realTime ? undefined : time.now,
    timeoutMs,
    failMode: 'local',
    replicas: 3,
    heartbeatIntervalMs: 500,
    probeIntervalMs: 500
  })
}

export const total = (run: ReplicaRun): number[] =>
  (run.replicas[0] ?? []).map((_, i) => run.replicas.reduce((sum, replica) => sum + (replica[i] ?? 0), 0))

/** Mean admitted per second over the bins after the first (the first holds the burst). */
export const steadyRate = (values: readonly number[]): number => {
  const steady = values.slice(1)
  return steady.reduce((a, b) => a + b, 0) / Math.max(1, steady.length)
}

// ---------------------------------------------------------------- act 4

export interface Client {
  label: string
  sent: number
  admitted: number
  /** Refusals by layer. */
  edge: number
  app: number
}

/**
 * Act 4, both layers on one app: an office of 10 users behind one NAT address
 * shares an edge bucket (100, then 50/s per IP); behind it, each user has an app
 * quota by tier (default 20 then 10/s, vip 200 then 100/s) and `POST /export` costs 10.
 */
export async function layersAct (time: Timeline, onTick: (elapsedMs: number, clients: Client[]) => void = () => {}, durationMs = 3000): Promise<Client[]> {
  const app = Fastify()
  const clients: Record<string, Client> = {}
  const client = (label: string): Client => (clients[label] = { label, sent: 0, admitted: 0, edge: 0, app: 0 })
  const office = client('office: 10 users behind one NAT IP, 10 req/s each')
  const vip = client('vip user, own IP, 40 req/s')
  const basic = client('default user, own IP, 40 req/s')
  const exporter = client('default user, POST /export (cost 10), 2/s')
  await app.register(tollgate, {
    store: memoryStore({ clock: time.now }),
    edge: { capacity: 100, refillPerSecond: 50 },
    app: { tiers: { default: { capacity: 20, refillPerSecond: 10 }, vip: { capacity: 200, refillPerSecond: 100 } } },
    onLimit: (request, decision) => { if (decision.layer === 'edge' || decision.layer === 'app') clients[String(request.headers['x-demo-client'])]![decision.layer]++ }
  })
  await app.register(jwt, { secret: 'demo-only-secret' })
  app.addHook('onRequest', async (request) => { if (request.headers.authorization !== undefined) await request.jwtVerify() })
  app.get('/', async () => 'ok')
  app.post('/export', { config: { rateLimit: { cost: 10 } } }, async () => 'exported')
  await app.ready()
  const bearer = (sub: string, tier = 'default'): string => `Bearer ${app.jwt.sign({ sub, tier })}`
  const officeTokens = Array.from({ length: 10 }, (_, i) => bearer(`office-${i}`))
  const [vipToken, basicToken, exporterToken] = [bearer('victor', 'vip'), bearer('alice'), bearer('erin')]
  const send = async (who: Client, ip: string, authorization: string, method: 'GET' | 'POST' = 'GET', url = '/'): Promise<void> => {
    who.sent++
    if (await status(app, ip, { method, url, headers: { authorization, 'x-demo-client': who.label } }) === 200) who.admitted++
  }
  const tickMs = 100
  try {
    await drive(time, durationMs, tickMs, async (at) => {
      const sends: Array<Promise<void>> = []
      for (const token of officeTokens) sends.push(send(office, '198.51.100.7', token))
      for (let i = 0; i < 4; i++) sends.push(send(vip, '198.51.100.30', vipToken))
      for (let i = 0; i < 4; i++) sends.push(send(basic, '198.51.100.31', basicToken))
      if (at % 500 === 0) sends.push(send(exporter, '198.51.100.32', exporterToken, 'POST', '/export'))
      await Promise.all(sends)
    }, (at) => { onTick(at, Object.values(clients)) })
  } finally {
    await app.close()
  }
  return Object.values(clients)
}

// ---------------------------------------------------------------- act 5

/** Every outcome a decision can have, in the order they are drawn (bottom first). */
export const OUTCOMES: readonly DecisionOutcome[] = ['allowed', 'near-limit', 'refused', 'would-refuse', 'unavailable']

export interface DecisionsAct {
  /** Width of a bin, ms. */
  binMs: number
  /** Decisions per bin, by outcome, as counted on `DECISION_CHANNEL`. */
  outcomes: Record<DecisionOutcome, number[]>
  /** Requests sent per bin, as counted by the client. */
  sent: number[]
  /** Responses 429, as counted by the client: a cross-check of the channel's `'refused'`. */
  tooMany: number
  /** Sum of the decisions' `storeMs` (ms), for their mean. */
  storeMs: number
  /** The edge bucket: B, tokens. */
  capacity: number
  /** The edge bucket: R, tokens per second. */
  refillPerSecond: number
  /** The flood: `floodPerSecond` requests a second for `floodMs` ms, then `backOffPerSecond` until `durationMs` (ms). */
  floodMs: number
  floodPerSecond: number
  backOffPerSecond: number
  durationMs: number
}

/**
 * Act 5: an edge of B = 20, R = 10/s per IP, and one client that sends 50 requests
 * a second for 4 s, then 5 a second for 3 s (at 4.1, 4.3, … 6.9 s). Decisions are
 * counted per 200 ms bin by outcome, by a subscriber to `DECISION_CHANNEL` (removed
 * at the end). The channel is process-wide: every app in this process publishes on
 * it, and here there is one. The edge alone decides: one decision per request.
 */
export async function decisionsAct (time: Timeline, onTick: (elapsedMs: number, act: DecisionsAct) => void = () => {}, durationMs = 7000): Promise<DecisionsAct> {
  const capacity = 20
  const refillPerSecond = 10
  const app = Fastify()
  await app.register(tollgate, { store: memoryStore({ clock: time.now }), edge: { capacity, refillPerSecond } })
  app.get('/', async () => 'ok')
  await app.ready()
  const binMs = 200
  const bins = Math.ceil(durationMs / binMs)
  const perBin = (): number[] => new Array<number>(bins).fill(0)
  const act: DecisionsAct = {
    binMs,
    outcomes: Object.fromEntries(OUTCOMES.map((outcome) => [outcome, perBin()])) as Record<DecisionOutcome, number[]>,
    sent: perBin(),
    tooMany: 0,
    storeMs: 0,
    capacity,
    refillPerSecond,
    floodMs: 4000,
    floodPerSecond: 50,
    backOffPerSecond: 5,
    durationMs
  }
  const start = time.now()
  const tickMs = 1000 / act.floodPerSecond // one request per tick in the flood
  // The bin of now, by the clock as a dashboard's would be; half a tick of slack, so that
  // in real time a tick fired a little early (timers round to 1 ms) or late counts in its own bin.
  const binOfNow = (): number => Math.min(bins - 1, Math.floor((time.now() - start + tickMs / 2) / binMs))
  const onDecision = (message: unknown): void => {
    const decision = message as DecisionMessage
    act.outcomes[decision.outcome][binOfNow()]!++
    act.storeMs += decision.storeMs
  }
  subscribe(DECISION_CHANNEL, onDecision)
  const backOffEvery = 1000 / act.backOffPerSecond // ms between requests after it
  try {
    await drive(time, durationMs, tickMs, async (at) => {
      // After the flood, one request every 200 ms from 4.1 s: half a period in, never on
      // the instant a token is due (at 4.0 s the bucket holds exactly 1 token in exact
      // arithmetic, and its floating-point refills may fall short of it by 1e-14).
      if (at >= act.floodMs && (at - act.floodMs - backOffEvery / 2) % backOffEvery !== 0) return
      act.sent[binOfNow()]!++
      if (await status(app, '198.51.100.50') === 429) act.tooMany++
    }, (at) => { onTick(at, act) })
  } finally {
    unsubscribe(DECISION_CHANNEL, onDecision)
    await app.close()
  }
  return act
}

/** Mean per second of `values` (per bin of `binMs`) over the bins from `fromMs` to `toMs`. */
export function perSecond (values: readonly number[], binMs: number, fromMs: number, toMs: number): number {
  return values.slice(fromMs / binMs, toMs / binMs).reduce((a, b) => a + b, 0) / ((toMs - fromMs) / 1000)
}
