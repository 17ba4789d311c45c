/**
 * Open-loop load generators: each class of clients sends at a fixed rate
 * whatever the answers (a slow server gets more requests in flight, not fewer),
 * round-robin over its clients so each client sends at `perClientPerSecond`.
 * Requests go over keep-alive connections opened before the run (an undici Pool
 * a class: `connectionsFor`); a request sent while all are busy waits in the
 * class's queue, and its latency counts from when it was sent. One without an
 * answer within `TIMEOUT_MS` of its sending counts as a timeout. Counted per
 * class, overall and per window of `windowMs`, by the time the request was sent.
 */
import { monitorEventLoopDelay, performance } from 'node:perf_hooks'
import { Pool } from 'undici'

/** A request that has no answer within this counts as a timeout. */
export const TIMEOUT_MS = 3000

export interface ClientClass {
  /** The class's name in the tables, e.g. 'fair users'. */
  name: string
  /** How many clients (each its own address; with `tier`, its own user too). */
  clients: number
  perClientPerSecond: number
  /** The users' tier (`x-tier`), or none: anonymous, known by address only. */
  tier?: 'vip' | 'default'
  /** The first address is 10.<addressBase>.0.1; classes that share a base share addresses. */
  addressBase: number
  /** When the class starts and stops sending, from the start of the run. Default: the whole run. */
  fromMs?: number
  toMs?: number
}

/** What a class got, overall or in one window. */
export interface Counts {
  sent: number
  ok: number
  /** 429s, and how many of them carried Retry-After. */
  tooMany: number
  tooManyRetryAfter: number
  /** 503s (shed by the capacity protection), and how many carried Retry-After. */
  shed: number
  shedRetryAfter: number
  /** 500 POOL_TIMEOUT: no database connection within the pool's timeout. */
  poolTimeouts: number
  /** Any other 5xx or answer, a connection error, no answer within TIMEOUT_MS. */
  otherErrors: number
  timeouts: number
  /** Latencies of the 2xx answers, in ms. */
  latencies: number[]
}

export interface ClassResult { spec: ClientClass, total: Counts, windows: Counts[] }

export interface LoadRun {
  classes: ClassResult[]
  durationMs: number
  windowMs: number
  /** This process's CPU over the run, in ms (user + system), and the p99 of its event loop's delay. */
  cpuMs: number
  eventLoopDelayP99Ms: number
}

export const emptyCounts = (): Counts => ({
  sent: 0, ok: 0, tooMany: 0, tooManyRetryAfter: 0, shed: 0, shedRetryAfter: 0, poolTimeouts: 0, otherErrors: 0, timeouts: 0, latencies: []
})

/** The address of client `i` of a class: 10.<base>.<i / 250>.<i % 250 + 1>. */
const address = (base: number, i: number): string => `10.${base}.${Math.floor(i / 250)}.${(i % 250) + 1}`

/** Counts one answer (or failure) in `counts`. */
function tally (counts: Counts, status: number | 'timeout' | 'error', retryAfter: boolean, poolTimeout: boolean, latencyMs: number): void {
  if (status === 'timeout') counts.timeouts++
  else if (status === 'error') counts.otherErrors++
  else if (status >= 200 && status < 300) { counts.ok++; counts.latencies.push(latencyMs) } else if (status === 429) {
    counts.tooMany++
    if (retryAfter) counts.tooManyRetryAfter++
  } else if (status === 503) {
    counts.shed++
    if (retryAfter) counts.shedRetryAfter++
  } else if (poolTimeout) counts.poolTimeouts++
  else counts.otherErrors++
}

interface Sender { send: (spec: ClientClass, index: number, into: Counts[]) => void, settled: () => Promise<void>, close: () => Promise<void> }

/** A request sent and not yet counted. */
interface Open { started: number, into: Counts[] }

/**
 * Sends requests over `pool`; each answer is counted into every Counts given. A request still
 * open after TIMEOUT_MS is counted a timeout by a sweep every 100 ms, and its late answer ignored
 * (one timer for all, not one a request).
 */
function sender (pool: Pool): Sender {
  const open = new Set<Open>()
  let whenSettled: (() => void) | undefined
  const close = (request: Open, status: number | 'timeout' | 'error', retryAfter = false, poolTimeout = false): void => {
    if (!open.delete(request)) return // counted a timeout already
    const latencyMs = performance.now() - request.started
    for (const counts of request.into) tally(counts, status, retryAfter, poolTimeout, latencyMs)
    if (open.size === 0) whenSettled?.()
  }
  const sweep = setInterval(() => {
    const late = performance.now() - TIMEOUT_MS
    for (const request of open) if (request.started <= late) close(request, 'timeout')
  }, 100)
  const one = async (spec: ClientClass, index: number, request: Open): Promise<void> => {
    const headers: Record<string, string> = { 'x-forwarded-for': address(spec.addressBase, index) }
    if (spec.tier !== undefined) Object.assign(headers, { 'x-user': `${spec.tier}-${spec.addressBase}-${index}`, 'x-tier': spec.tier })
    try {
      const answer = await pool.request({ path: '/work', method: 'GET', headers })
      const retryAfter = answer.headers['retry-after'] !== undefined
      const poolTimeout = answer.statusCode === 500 && (await answer.body.text()).includes('POOL_TIMEOUT')
      if (answer.statusCode !== 500) await answer.body.dump()
      close(request, answer.statusCode, retryAfter, poolTimeout)
    } catch {
      close(request, 'error')
    }
  }
  return {
    send: (spec, index, into) => {
      for (const counts of into) counts.sent++
      const request = { started: performance.now(), into }
      open.add(request)
      void one(spec, index, request)
    },
    settled: async () => {
      if (open.size > 0) await new Promise<void>((resolve) => { whenSettled = resolve })
      clearInterval(sweep)
    },
    close: async () => { await pool.destroy() } // requests counted as timeouts may still hold connections
  }
}

/**
 * A class's connections: two per client (a browser opens up to six), and for a class of few
 * clients and a high rate, what 1.2 s of its requests need (a request may wait the pool's 1 s
 * timeout), at most 3 000: enough that the server, not this process, holds the queue.
 */
export const connectionsFor = (spec: ClientClass): number =>
  Math.min(3000, Math.max(2 * spec.clients, Math.ceil(1.2 * spec.clients * spec.perClientPerSecond)))

/** Opens `count` connections of `pool`: as many requests at once (to `/stats`, which no limit counts). */
async function warm (pool: Pool, count: number): Promise<void> {
  await Promise.all(Array.from({ length: count }, async () => {
    const answer = await pool.request({ path: '/stats', method: 'GET' })
    await answer.body.dump()
  }))
}

/**
 * Drives the classes against `origin` for `durationMs`, each at its fixed rate from `fromMs` to `toMs`;
 * `onWindow` is called after each window. Resolves once every request has its answer or timed out.
 */
export async function drive (origin: string, specs: readonly ClientClass[], durationMs: number, windowMs = 500, onWindow: (run: LoadRun) => void = () => {}): Promise<LoadRun> {
  const windowCount = Math.ceil(durationMs / windowMs)
  const classes: ClassResult[] = specs.map((spec) => ({ spec, total: emptyCounts(), windows: Array.from({ length: windowCount }, emptyCounts) }))
  const pools = specs.map((spec) => new Pool(origin, { connections: connectionsFor(spec), pipelining: 1, keepAliveTimeout: 60_000 }))
  await Promise.all(specs.map(async (spec, c) => { await warm(pools[c] as Pool, connectionsFor(spec)) }))
  const senders = pools.map(sender)
  const sent = specs.map(() => 0)
  const cpu = process.cpuUsage()
  const delay = monitorEventLoopDelay({ resolution: 10 })
  delay.enable()
  const started = performance.now()
  const run: LoadRun = { classes, durationMs, windowMs, cpuMs: 0, eventLoopDelayP99Ms: 0 }
  let lastWindow = 0
  await new Promise<void>((resolve) => {
    const timer = setInterval(() => {
      const elapsed = performance.now() - started
      const at = Math.min(elapsed, durationMs)
      const window = Math.min(windowCount - 1, Math.floor(at / windowMs))
      specs.forEach((spec, c) => {
        const from = spec.fromMs ?? 0
        const due = Math.floor((Math.min(at, spec.toMs ?? durationMs) - from) * spec.clients * spec.perClientPerSecond / 1000)
        const result = classes[c] as ClassResult
        for (; (sent[c] as number) < due; sent[c] = (sent[c] as number) + 1) {
          ;(senders[c] as Sender).send(spec, (sent[c] as number) % spec.clients, [result.total, result.windows[window] as Counts])
        }
      })
      if (window > lastWindow || elapsed >= durationMs) { lastWindow = window; onWindow(run) }
      if (elapsed >= durationMs) { clearInterval(timer); resolve() }
    }, 2)
  })
  await Promise.all(senders.map(async (one) => { await one.settled() }))
  const used = process.cpuUsage(cpu)
  run.cpuMs = (used.user + used.system) / 1000
  delay.disable()
  run.eventLoopDelayP99Ms = delay.percentile(99) / 1e6
  await Promise.all(senders.map(async (one) => { await one.close() }))
  return run
}

/** The `q` quantile (0 to 1) of `values`, in their unit; NaN when there are none. */
export function quantile (values: readonly number[], q: number): number {
  if (values.length === 0) return Number.NaN
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)] as number
}

/** Sums counts (e.g. the classes of a run, or a class's windows). */
export function addCounts (all: readonly Counts[]): Counts {
  const sum = emptyCounts()
  for (const counts of all) {
    for (const key of Object.keys(sum) as Array<keyof Counts>) {
      if (key === 'latencies') sum.latencies.push(...counts.latencies)
      else sum[key] += counts[key]
    }
  }
  return sum
}
