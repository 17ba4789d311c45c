/**
 * MIGRATING.md's worked example, run as a user runs it: three replica processes
 * of the migrated app (migration-app.ts, the text of the guide's block) on one
 * real redis-server, each on its own port, driven over HTTP round-robin, as a
 * load balancer would. Each test asserts what @fastify/rate-limit (FRL) gave the
 * app before the move, or, where the guide says it differs (a token bucket, not
 * a window; penalty strikes counted per process), what it says instead.
 *
 * Client addresses: every request comes from 127.0.0.1, the app's trusted proxy
 * (`trustProxy`, as behind the replicas' load balancer), with an
 * `X-Forwarded-For` naming the client. So the allow-list (10.0.0.0/8) is tried
 * with an internal client address, and each test has a client address of its
 * own (its own per-IP buckets), without binding to other local addresses.
 *
 * Time: the buckets run on Redis's clock, which this test does not move. The
 * bounds allow the refill of the seconds a test takes (B + R·t, t measured
 * here); the one wait is 0.2 s, for a penalty's write to reach Redis and for the
 * other replicas' deny caches to let go of a refusal from before it (0.1 s).
 */
import t, { type Test } from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { createInterface } from 'node:readline'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { requireRedis, sleep, startOnFreePort, type RedisServer } from '../redis-server.js'
import { killAtExit } from '../faults/cleanup.js'
import { stopChild } from '../faults/processes.js'
import { untracedEnv } from '../child-env.js'

const APP = pathToFileURL(fileURLToPath(new URL('./migration-app.js', import.meta.url))).href
/** The edge's refill: 100 a minute. */
const RATE = 100 / 60
const REPLICAS = 3

/** A Fastify log line, as JSON. */
interface LogLine { level: number, msg?: string, code?: string }

/** One replica: the app's module, in a process of its own, which exits when this one's pipe to it closes (this process died). */
class Replica {
  readonly lines: LogLine[] = []
  port = 0
  private readonly child: ChildProcess

  constructor (redisPort: number) {
    const script = `process.stdin.on('end', () => process.exit(0)).on('error', () => process.exit(0)).resume()\nawait import(${JSON.stringify(APP)})`
    this.child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      env: untracedEnv({ PORT: '0', REDIS_URL: `redis://127.0.0.1:${redisPort}`, TRUSTED_PROXY: '127.0.0.1' }),
      stdio: ['pipe', 'pipe', 'inherit']
    })
  }

  get pid (): number | undefined { return this.child.pid }

  /** Resolves once the app logs that it listens on 127.0.0.1 (a busy machine starts a process slowly). */
  ready (timeoutMs = 40_000): Promise<this> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => { reject(new Error(`a replica did not listen within ${timeoutMs} ms`)) }, timeoutMs)
      this.child.once('exit', (code, signal) => { clearTimeout(timer); reject(new Error(`a replica exited (${code ?? signal})`)) })
      createInterface({ input: this.child.stdout as NodeJS.ReadableStream }).on('line', (text) => {
        let line: LogLine
        try { line = JSON.parse(text) as LogLine } catch { return }
        this.lines.push(line)
        const listening = /^Server listening at http:\/\/127\.0\.0\.1:(\d+)$/.exec(line.msg ?? '')
        if (listening !== null) {
          this.port = Number(listening[1])
          clearTimeout(timer)
          resolve(this)
        }
      })
    })
  }

  stop (): Promise<void> { return stopChild(this.child) }
}

/** What a test reads of an answer. */
interface Answer {
  replica: number
  status: number
  body: unknown
  limit: string | null
  remaining: string | null
  reset: string | null
  retryAfter: string | null
}

interface Send { method?: 'GET' | 'POST', ip: string, key?: string, to?: number }

/** The replicas, and the round-robin of a load balancer over them (`to` picks one). */
class Balancer {
  private next = 0
  constructor (readonly replicas: Replica[]) {}

  async send (path: string, { method = 'GET', ip, key, to }: Send): Promise<Answer> {
    const replica = to ?? this.next++ % this.replicas.length
    const headers: Record<string, string> = { 'x-forwarded-for': ip }
    if (key !== undefined) headers['x-api-key'] = key
    const response = await fetch(`http://127.0.0.1:${(this.replicas[replica] as Replica).port}${path}`, { method, headers })
    const text = await response.text()
    const header = (name: string): string | null => response.headers.get(name)
    return {
      replica,
      status: response.status,
      body: header('content-type')?.startsWith('application/json') === true ? JSON.parse(text) as unknown : text,
      limit: header('x-ratelimit-limit'),
      remaining: header('x-ratelimit-remaining'),
      reset: header('x-ratelimit-reset'),
      retryAfter: header('retry-after')
    }
  }

  /** `count` requests one after the other; returns the answers and the seconds they took. */
  async burst (count: number, path: string, options: (i: number) => Send): Promise<{ answers: Answer[], seconds: number }> {
    const start = performance.now()
    const answers: Answer[] = []
    for (let i = 0; i < count; i++) answers.push(await this.send(path, options(i)))
    return { answers, seconds: (performance.now() - start) / 1000 }
  }
}

const statuses = (answers: Answer[]): Record<number, number> => {
  const counts: Record<number, number> = {}
  for (const answer of answers) counts[answer.status] = (counts[answer.status] ?? 0) + 1
  return counts
}
const noRateLimitHeaders = (answers: Answer[]): boolean =>
  answers.every((answer) => answer.limit === null && answer.remaining === null && answer.reset === null)

async function start (t: Test): Promise<{ redis: RedisServer, lb: Balancer }> {
  const redis = await startOnFreePort()
  const forgetRedis = killAtExit(() => redis.pid)
  t.teardown(async () => { await redis.stop(); forgetRedis() })
  const replicas = Array.from({ length: REPLICAS }, () => new Replica(redis.port))
  const forget = replicas.map((replica) => killAtExit(replica.pid))
  t.teardown(async () => { await Promise.all(replicas.map((replica) => replica.stop())); forget.forEach((f) => { f() }) })
  await Promise.all(replicas.map((replica) => replica.ready()))
  return { redis, lb: new Balancer(replicas) }
}

t.setTimeout(90_000)

t.test('MIGRATING.md worked example: three replicas on one Redis behave as the FRL app did', async (t) => {
  if (!requireRedis(t)) return
  const { redis, lb } = await start(t)

  await t.test('100 requests per client across the three replicas together, not 300; FRL\'s headers and the custom 429 body', async (t) => {
    const { answers, seconds } = await lb.burst(120, '/items', () => ({ ip: '203.0.113.1', key: 'key-1' }))
    const allowed = answers.filter((answer) => answer.status === 200)
    const refused = answers.filter((answer) => answer.status !== 200)
    t.ok(allowed.length >= 100 && allowed.length <= 100 + RATE * seconds,
      `${allowed.length} admitted of 120 in ${seconds.toFixed(2)} s: 100 at once, plus the refill (B + R·t = ${(100 + RATE * seconds).toFixed(1)})`)
    t.same(statuses(refused), { 429: refused.length }, 'the rest are 429')
    for (let replica = 0; replica < REPLICAS; replica++) {
      t.ok(allowed.some((a) => a.replica === replica) && refused.some((a) => a.replica === replica), `replica ${replica} admitted some and refused some: one quota`)
    }
    // One bucket in Redis: the j-th admission leaves 99 − j, whichever replica took it (plus what refilled meanwhile).
    const shared = allowed.every((answer, j) => answer.limit === '100' && Number(answer.remaining) >= 99 - j && Number(answer.remaining) <= 99 - j + RATE * seconds)
    t.ok(shared, `admitted answers carry X-RateLimit-Limit 100 and a remaining counted down across the replicas: ${allowed.slice(0, 6).map((a) => a.remaining).join(', ')}, …`)
    t.ok(allowed.every((answer) => /^\d+$/.test(answer.reset ?? '') && Number(answer.reset) <= 60), 'and X-RateLimit-Reset (addHeadersOnExceeding)')
    const first = refused[0]
    t.same(first?.body, { statusCode: 429, error: 'slow_down', retryInSeconds: 1 }, 'the body of errorResponseBuilder, from setErrorHandler')
    // FRL: Retry-After and the reset count to the window's end (up to 60 s). Here Retry-After is the next token's time
    // (0.6 s, rounded up), and the reset the time until the bucket is full again.
    t.ok(refused.every((answer) => answer.retryAfter === '1' && answer.limit === '100' && answer.remaining === '0' && ['59', '60'].includes(answer.reset ?? '')),
      `a 429 carries Retry-After 1, X-RateLimit-Limit 100, Remaining 0, Reset 59 or 60 (${String(first?.retryAfter)}, ${String(first?.limit)}, ${String(first?.remaining)}, ${String(first?.reset)})`)
  })

  await t.test('the allow-list: an internal client address is never limited, nor does it get the headers', async (t) => {
    const internal = await lb.burst(105, '/items', () => ({ ip: '10.1.2.3' }))
    t.same(statuses(internal.answers), { 200: 105 }, '105 requests from 10.1.2.3, all 200')
    // FRL's allow-list function read req.ip; its array form would have been matched against the key (the API key).
    const withKey = await lb.burst(105, '/items', () => ({ ip: '10.200.0.1', key: 'key-1' }))
    t.same(statuses(withKey.answers), { 200: 105 }, 'with the API key the first test spent: all 200 from an internal address')
    t.ok(noRateLimitHeaders([...internal.answers, ...withKey.answers]), 'no X-RateLimit-* header on them')
  })

  await t.test('/health is never limited', async (t) => {
    const { answers } = await lb.burst(105, '/health', () => ({ ip: '203.0.113.2' }))
    t.same(statuses(answers), { 200: 105 }, '105 requests, all 200')
    t.ok(noRateLimitHeaders(answers), 'no X-RateLimit-* header')
  })

  await t.test('the login guard: 5 a minute per IP whatever the API key, then 429, then 403 once a replica counted 4 refusals', async (t) => {
    const after = 4 // FRL's ban: 3 (403 from its 4th refusal)
    const { answers } = await lb.burst(20, '/login', (i) => ({ method: 'POST', ip: '203.0.113.50', key: `login-key-${i}` }))
    t.same(answers.slice(0, 5).map((a) => [a.status, a.limit, a.remaining]),
      [[200, '5', '4'], [200, '5', '3'], [200, '5', '2'], [200, '5', '1'], [200, '5', '0']], 'five pass (a new API key each: the route is kept by IP)')
    const refusals = answers.slice(5)
    const firstBan = refusals.findIndex((a) => a.status === 403)
    // Strikes are counted per replica: spread over three, the first 403 comes after `after` to 3 × `after` refusals
    // (round-robin: the 10th, each replica's 4th). FRL counts them in Redis: its 4th refusal.
    t.ok(firstBan + 1 >= after && firstBan + 1 <= REPLICAS * after, `the first 403 is refusal ${firstBan + 1}, within ${after} to ${REPLICAS * after}`)
    t.ok(refusals.slice(0, firstBan).every((a) => a.status === 429 && a.retryAfter === '12' && a.remaining === '0'), '429s before it, Retry-After 12 (a token every 12 s)')
    t.same(refusals[0]?.body, { statusCode: 429, error: 'slow_down', retryInSeconds: 12 }, 'the custom body')
    const banned = refusals.slice(firstBan)
    t.ok(banned.length >= REPLICAS && banned.every((a) => a.status === 403 && ['59', '60'].includes(a.retryAfter ?? '')), `then 403 on every replica, Retry-After 59–60: the penalty's 60 s (${banned.map((a) => a.status).join(' ')})`)
    t.same(banned[0]?.body, { statusCode: 403, error: 'slow_down', retryInSeconds: 60 }, 'the custom body, 403 as FRL\'s ban')
    const elsewhere = await lb.send('/items', { ip: '203.0.113.50', key: 'login-key-other' })
    t.equal(elsewhere.status, 200, 'the rest of the app stays open to that address (a route\'s penalty)')
  })

  await t.test('a penalty started on one replica holds on the others (README: "It holds on every replica")', async (t) => {
    const ip = '203.0.113.51'
    const login = (to: number): Promise<Answer> => lb.send('/login', { method: 'POST', ip, to })
    for (let i = 0; i < 5; i++) await login(i % REPLICAS)
    for (let replica = 0; replica < REPLICAS; replica++) t.equal((await login(replica)).status, 429, `replica ${replica} refuses once (a strike there)`)
    const atFirst = [await login(0), await login(0), await login(0)].map((a) => a.status)
    t.same(atFirst, [429, 429, 403], 'replica 0\'s 4th refusal starts the penalty: 403')
    // The penalty's write is not awaited by the refusal that starts it. Replicas 1 and 2 refused this client before,
    // and their deny caches hold that refusal (429, Retry-After 12) at most 0.1 s past the penalty's start (README).
    await sleep(200)
    const others = [await login(1), await login(2)]
    t.same(others.map((a) => [a.status, a.retryAfter]), [[403, '60'], [403, '60']], 'replicas 1 and 2 answer 403 until the penalty ends')
  })

  await t.test('the tier-dependent route: a VIP gets 300 a minute on /reports/:id, others 100, apart from the global limit', async (t) => {
    const vip = await lb.burst(110, '/reports/7', () => ({ ip: '203.0.113.60', key: 'vip-1' }))
    t.same(statuses(vip.answers), { 200: 110 }, '110 requests of a VIP, all 200')
    t.ok(vip.answers.every((a) => a.limit === '300'), 'X-RateLimit-Limit 300')
    const items = await lb.send('/items', { ip: '203.0.113.60', key: 'vip-1' })
    t.equal(items.remaining, '99', 'the VIP\'s global bucket is untouched: the route\'s quota replaces it (FRL: a route limit replaces the global one)')
    const regular = await lb.send('/reports/7', { ip: '203.0.113.61', key: 'key-2' })
    t.same([regular.status, regular.limit, regular.remaining], [200, '100', '99'], 'another customer: 100')
    const anonymous = await lb.send('/reports/7', { ip: '203.0.113.62' })
    t.same([anonymous.status, anonymous.limit, anonymous.remaining], [200, '100', '99'], 'without an API key: 100, per IP')
    const spent = await lb.send('/reports/7', { ip: '203.0.113.1', key: 'key-1' })
    t.equal(spent.status, 200, 'the client that spent its global 100 still reads reports')
  })

  await t.test('Redis down: requests are served, uncounted (failMode \'open\', FRL\'s skipOnError)', async (t) => {
    const before = lb.replicas.flatMap((replica) => replica.lines).filter((line) => line.level >= 40)
    t.same(before, [], 'nothing logged at warn or above until now (no misconfiguration warning at startup)')
    await redis.kill()
    const { answers } = await lb.burst(150, '/items', () => ({ ip: '203.0.113.70', key: 'key-3' }))
    // Under failMode 'local' each replica would admit 40 of them (its share of 100, with 20% headroom).
    t.same(statuses(answers), { 200: 150 }, '150 requests of one client, all 200')
    t.ok(answers.every((a) => a.limit === '100' && a.remaining === null && a.reset === null),
      'X-RateLimit-Limit only: what is left is unknown while uncounted (FRL: the full max as remaining)')
    const logged = lb.replicas.map((replica) => replica.lines.some((line) => line.level === 40 && /Redis unavailable/.test(line.msg ?? '')))
    t.same(logged, [true, true, true], 'each replica logged the outage')
  })
})
