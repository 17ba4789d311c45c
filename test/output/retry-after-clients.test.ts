/**
 * Real HTTP clients obey the answers: `got` and undici's `RetryAgent`, each with
 * its own stock retry-on-429 behaviour, send a burst larger than the edge bucket
 * to a server listening on 127.0.0.1, and every request finishes, waiting what
 * `Retry-After` says, with exactly the retries the bucket's arithmetic implies.
 *
 * Each client's own backoff is cut to 10 ms, so that only `Retry-After` can make
 * it wait a second: without the header, or with a wrong one, the counts change.
 *
 * Real time, since the clients sleep: the bucket refills 2 tokens per second, so
 * every wait (at most 1/2 s for one token) is announced as `Retry-After: 1`, and
 * the whole file takes about 5 s.
 */
import t, { type Test } from 'tap'
import { performance } from 'node:perf_hooks'
import type { AddressInfo } from 'node:net'
import Fastify from 'fastify'
import got from 'got'
import { Agent, RetryAgent, request } from 'undici'
import tollgate from '../../lib/index.js'

const CAPACITY = 3
const REFILL_PER_SECOND = 2
const RETRY_AFTER_S = 1
const BURST = 7

/**
 * Attempts the server sees when `burst` requests arrive at once at a full bucket
 * and every refused one comes back `retryAfterS` later: the bucket admits
 * `capacity`, then each wave of retries finds `refill × retryAfterS` new tokens
 * and admits that many. 7 requests, B = 3, R = 2/s, 1 s: 7 + 4 + 2 = 13 attempts.
 *
 * Exact, not approximate: a wave's retries arrive within a few ms of each other,
 * 1 s after their refusals, when the bucket holds 2 tokens plus what those ms
 * added; a third token would need 0.5 s more. Only a retry sent 0.5 s late (or
 * early) could change the count, and that is what this test exists to catch.
 */
function expectedAttempts (burst: number, capacity: number, refillPerSecond: number, retryAfterS: number): number {
  let attempts = burst
  let waiting = burst - capacity
  while (waiting > 0) {
    attempts += waiting
    waiting -= Math.min(waiting, refillPerSecond * retryAfterS)
  }
  return attempts
}

interface Attempt { n: string, arrivedMs: number, status?: number, retryAfter?: unknown }

/** A server on 127.0.0.1 with an edge bucket of 3 refilling 2/s; records every attempt it sees. */
async function listen (t: Test): Promise<{ url: string, attempts: Attempt[] }> {
  const attempts: Attempt[] = []
  const app = Fastify()
  // Before the plugin's hook: every attempt is recorded, refused ones included.
  app.addHook('onRequest', async (request) => {
    const attempt: Attempt = { n: (request.query as { n: string }).n, arrivedMs: performance.now() }
    attempts.push(attempt)
    ;(request as unknown as { attempt: Attempt }).attempt = attempt
  })
  app.addHook('onResponse', async (request, reply) => {
    const attempt = (request as unknown as { attempt: Attempt }).attempt
    attempt.status = reply.statusCode
    attempt.retryAfter = reply.getHeader('retry-after')
  })
  await app.register(tollgate, { edge: { capacity: CAPACITY, refillPerSecond: REFILL_PER_SECOND } })
  app.get('/', async () => 'ok')
  await app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => app.close())
  return { url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/`, attempts }
}

/** What the server saw matches the bucket's arithmetic, and every retry waited its Retry-After. */
function checkAttempts (t: Test, attempts: Attempt[]): void {
  t.equal(attempts.length, expectedAttempts(BURST, CAPACITY, REFILL_PER_SECOND, RETRY_AFTER_S), 'attempts: the burst, then one wave of retries per refill')
  t.equal(attempts.filter((a) => a.status === 200).length, BURST, 'each request admitted once')
  const refused = attempts.filter((a) => a.status === 429)
  t.equal(refused.length, attempts.length - BURST, 'every other attempt a 429')
  t.ok(refused.every((a) => a.retryAfter === RETRY_AFTER_S), `every 429 says Retry-After: ${RETRY_AFTER_S}`)
  for (const n of new Set(attempts.map((a) => a.n))) {
    const mine = attempts.filter((a) => a.n === n)
    t.equal(mine.at(-1)?.status, 200, `request ${n} ends admitted, after ${mine.length - 1} retries`)
    for (let i = 1; i < mine.length; i++) {
      const waited = (mine[i] as Attempt).arrivedMs - (mine[i - 1] as Attempt).arrivedMs
      // 2 ms of slack: Node starts a client's timer from its event loop's cached clock, in whole ms.
      t.ok(waited >= RETRY_AFTER_S * 1000 - 2, `request ${n}, retry ${i}: came back after ${waited.toFixed(0)} ms, not before Retry-After`)
    }
  }
}

t.test('got, retrying on 429, finishes a burst larger than the bucket', async (t) => {
  const { url, attempts } = await listen(t)
  let retries = 0
  const client = got.extend({ retry: { limit: 5, backoffLimit: 10, noise: 0 }, hooks: { beforeRetry: [() => { retries++ }] } })
  const bodies = await Promise.all(Array.from({ length: BURST }, async (_, n) => await client(`${url}?n=${n}`).text()))
  t.same(bodies, Array(BURST).fill('ok'), 'every request finished with 200')
  checkAttempts(t, attempts)
  t.equal(retries, attempts.length - BURST, 'got retried exactly as often as the server refused')
})

t.test("undici's RetryAgent finishes a burst larger than the bucket", async (t) => {
  const { url, attempts } = await listen(t)
  const agent = new RetryAgent(new Agent(), { maxRetries: 5, minTimeout: 10, maxTimeout: 10_000 })
  t.teardown(() => agent.close())
  const answers = await Promise.all(Array.from({ length: BURST }, async (_, n) => {
    const { statusCode, body } = await request(`${url}?n=${n}`, { dispatcher: agent })
    return `${statusCode} ${await body.text()}`
  }))
  t.same(answers, Array(BURST).fill('200 ok'), 'every request finished with 200')
  checkAttempts(t, attempts)
})
