/**
 * Runs one fault case once: a private Redis (or Sentinel group), N replica
 * processes (some behind a TCP proxy), load on every replica from the window's
 * start, the fault `AT_S` into the window, and the window's end at least
 * `TAIL_S` after the fault's end. Stops everything it started, on failure too.
 */
import { startOnFreePort, type RedisServer } from '../redis-server.js'
import { killAtExit } from './cleanup.js'
import { BOUNDS, FORMULAS, SLACK, type BoundInput } from './bounds.js'
import { DEFAULT_LOAD, type FaultCase } from './cases.js'
import { DEFAULTS, type RedisTarget, type ReplicaConfig } from './config.js'
import { DURATION_S, inject, type FaultContext, type FaultOutcome } from './injectors.js'
import { Load } from './load.js'
import { admittedIn, failovers, recoveryMs, statusCounts, unexpectedAnswers } from './measure.js'
import { startReplicas, waitForCount, type ReplicaProcess, type StoreEvent } from './processes.js'
import { TcpProxy } from './proxy.js'
import { startSentinelGroup, type SentinelGroup } from './sentinel.js'

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/** The fault starts this long into the window. */
export const AT_S = 1.5
/** The window ends at least this long after the fault's end. */
export const TAIL_S = 4
/** The shortest window. */
export const MIN_WINDOW_S = 6

export interface RunResult {
  caseId: string
  bound: number
  formula: string
  input: BoundInput
  admitted: number
  passed: boolean
  /** Answers other than 200/429 (and 503 under 'closed'), by status; 0 = a failed request. */
  unexpected: Record<string, number>
  statuses: Record<string, number>
  /** Ms from the fault's end to the shared quota again (undefined: never; 0: never left it). */
  recoveryMs: number | undefined
  /** Store 'degraded' events from the window's start. */
  failovers: number
  /** Whether every replica counted N live replicas before the load began. */
  counted: boolean
}

interface Backend { target: RedisTarget, redis: RedisServer | undefined, sentinel: SentinelGroup | undefined, stop: () => Promise<void> }

async function backend (fault: FaultCase['fault']): Promise<Backend> {
  if (fault === 'sentinel-failover') {
    const group = await startSentinelGroup({ downAfterMs: 1000, failoverTimeoutMs: 5000 })
    return { target: { sentinels: group.sentinels, name: group.name }, redis: undefined, sentinel: group, stop: () => group.stop() }
  }
  const redis = await startOnFreePort(() => ['--enable-debug-command', 'yes'])
  const forget = killAtExit(() => redis.pid) // read at exit: a restart changes it
  return { target: { host: '127.0.0.1', port: redis.port }, redis, sentinel: undefined, stop: async () => { await redis.stop(); forget() } }
}

/** Every process and socket a run started, so that one `stop()` ends them all. */
class Run {
  readonly events: StoreEvent[] = []
  readonly replicas: ReplicaProcess[] = []
  readonly proxies = new Map<number, TcpProxy>()
  backend: Backend | undefined
  load: Load | undefined

  constructor (readonly faultCase: FaultCase) {}

  config (index: number, target: RedisTarget): ReplicaConfig {
    const { mode, failMode, fault } = this.faultCase
    return {
      redis: target,
      edge: { capacity: DEFAULTS.capacity, refillPerSecond: DEFAULTS.refillPerSecond, mode },
      store: { failMode, heartbeatIntervalMs: DEFAULTS.heartbeatIntervalMs, fallbackHeadroom: DEFAULTS.headroom },
      ...(fault === 'skew' && index === 0 ? { skew: { offsetMs: 3_600_000, rate: 2 } } : {})
    }
  }

  /** Starts `count` replicas (replica 0 behind a proxy in the proxy case) and puts them under load if it runs. */
  async addReplicas (count: number): Promise<void> {
    const target = (this.backend as Backend).target
    if (this.faultCase.fault === 'proxy-cut' && this.replicas.length === 0 && 'port' in target) {
      const proxy = new TcpProxy(target.port)
      this.proxies.set(0, proxy)
      const port = await proxy.listen()
      this.replicas.push(...await startReplicas((i) => this.config(i, i === 0 ? { host: '127.0.0.1', port } : target), count, this.events))
      return
    }
    const added = await startReplicas((i) => this.config(i, target), count, this.events, this.replicas.length)
    this.replicas.push(...added)
    for (const replica of added) this.load?.add(replica)
  }

  async stop (): Promise<void> {
    await this.load?.stop()
    await Promise.all(this.replicas.map((replica) => replica.stop()))
    for (const proxy of this.proxies.values()) await proxy.close()
    await this.backend?.stop()
  }
}

/** Runs `faultCase` once. */
export async function runCase (faultCase: FaultCase): Promise<RunResult> {
  const run = new Run(faultCase)
  try {
    run.backend = await backend(faultCase.fault)
    await run.addReplicas(DEFAULTS.replicas)
    const counted = await waitForCount(run.replicas, DEFAULTS.replicas)
    return await measureRun(run, counted)
  } finally {
    await run.stop()
  }
}

async function measureRun (run: Run, counted: boolean): Promise<RunResult> {
  const { faultCase, replicas } = run
  const load = run.load = new Load(faultCase.load ?? DEFAULT_LOAD)
  const startMs = performance.now()
  for (const replica of replicas) load.add(replica)
  await sleep(AT_S * 1000)
  const context: FaultContext = { redis: run.backend?.redis, sentinel: run.backend?.sentinel, replicas, proxies: run.proxies, load, addReplicas: (count) => run.addReplicas(count) }
  const outcome = await inject(faultCase.fault, context)
  const endMs = Math.max(startMs + Math.max(MIN_WINDOW_S, AT_S + DURATION_S[faultCase.fault] + TAIL_S) * 1000, outcome.endMs + TAIL_S * 1000)
  await sleep(endMs - performance.now())
  const windowEndMs = performance.now() // before the drain: answers after it do not count
  await load.stop()
  return result(run, outcome, startMs, windowEndMs, counted)
}

function result (run: Run, outcome: FaultOutcome, startMs: number, endMs: number, counted: boolean): RunResult {
  const { faultCase, replicas, events } = run
  const samples = run.load?.samples ?? []
  const input: BoundInput = {
    B: DEFAULTS.capacity,
    R: DEFAULTS.refillPerSecond,
    N: DEFAULTS.replicas,
    h: DEFAULTS.headroom,
    t: (endMs - startMs) / 1000,
    d: outcome.unreachableS,
    k: outcome.cut,
    M: DEFAULTS.replicas + outcome.added,
    I: DEFAULTS.heartbeatIntervalMs / 1000
  }
  const bound = BOUNDS[faultCase.bound](input)
  const admitted = admittedIn(samples, startMs, endMs)
  const allowed = new Set(faultCase.failMode === 'closed' ? [200, 429, 503] : [200, 429])
  const killed = new Map(replicas.filter((replica) => replica.killedAtMs !== undefined).map((replica) => [replica.index, replica.killedAtMs as number]))
  const unexpected = unexpectedAnswers(samples, allowed, killed)
  return {
    caseId: faultCase.id,
    bound,
    formula: FORMULAS[faultCase.bound],
    input,
    admitted,
    passed: admitted <= bound + SLACK && Object.keys(unexpected).length === 0,
    unexpected,
    statuses: statusCounts(samples),
    recoveryMs: faultCase.fault === 'none' ? 0 : recoveryMs(events, outcome.startMs, outcome.endMs),
    failovers: failovers(events, startMs),
    counted
  }
}
