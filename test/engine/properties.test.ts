/**
 * Property tests (fast-check): the engine against a plain reference model, the
 * memory store against the Redis script, and the invariants every store keeps.
 *
 * The seed is fixed, so CI is reproducible. `TOLLGATE_PROPERTY_SEED=random npm test`
 * draws a new one (printed), `TOLLGATE_PROPERTY_SEED=<n>` replays one, and
 * `TOLLGATE_PROPERTY_RUNS` sets the number of runs (default 200).
 */
import t, { type Test } from 'tap'
import fc from 'fast-check'
import Fastify, { type LightMyRequestResponse } from 'fastify'
import { performance } from 'node:perf_hooks'
import tollgate, { consume, memoryStore, redisStore, type BucketDecision, type BucketPolicy, type BucketRequest, type BucketState, type Store, type StoreDecision } from '../../lib/index.js'
import { namedPolicy, retryAfterSeconds, stateMember } from '../../lib/output/headers.js'
import { requireRedis, startRedis } from '../redis-server.js'

const SEED_SETTING = process.env.TOLLGATE_PROPERTY_SEED
const SEED = SEED_SETTING === 'random' ? Math.floor(Math.random() * 2 ** 31) : Number(SEED_SETTING ?? 20261130)
const RUNS = Number(process.env.TOLLGATE_PROPERTY_RUNS ?? 200)
t.comment(`property seed ${SEED}, ${RUNS} runs (replay with TOLLGATE_PROPERTY_SEED=${SEED})`)

async function holds<Ts> (t: Test, name: string, property: fc.IRawProperty<Ts>, runs = RUNS): Promise<void> {
  const details = await fc.check(property, { seed: SEED, numRuns: runs })
  t.notOk(details.failed, name, details.failed ? { diagnostic: true, report: fc.defaultReportMessage(details) } : {})
}

// ------------------------------------------------------------ arbitraries

const policyArb: fc.Arbitrary<BucketPolicy> = fc.record({
  capacity: fc.oneof(fc.integer({ min: 1, max: 50 }), fc.double({ min: 1, max: 1000, noNaN: true })),
  refillPerSecond: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 20 }), fc.double({ min: 0.001, max: 1000, noNaN: true }))
})

/** A time step in ms: mostly forward, sometimes nothing, sometimes backwards (a clock that jumps). */
const dtArb = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 0, max: 3000 }) },
  { weight: 2, arbitrary: fc.double({ min: 0, max: 500, noNaN: true }) },
  { weight: 1, arbitrary: fc.integer({ min: -2000, max: -1 }) }
)

/** A cost as a fraction of a bucket's capacity (0 to 1.2: some can never pass). */
const costShareArb = fc.oneof(fc.double({ min: 0, max: 1.2, noNaN: true }), fc.constantFrom(0, 1, 0.5))

/** `tier` 1: the bucket's other policy (see `tieredArb`). */
interface Step { dt: number, buckets: Array<{ bucket: number, costShare: number, tier?: number }> }

/** Steps over `bucketCount` buckets; each step consumes 1 to 3 distinct buckets. */
const stepsArb = (bucketCount: number, forwardOnly = false): fc.Arbitrary<Step[]> => fc.array(fc.record({
  dt: forwardOnly ? fc.integer({ min: 0, max: 3000 }) : dtArb,
  buckets: fc.uniqueArray(fc.record({ bucket: fc.integer({ min: 0, max: bucketCount - 1 }), costShare: costShareArb }), { minLength: 1, maxLength: Math.min(3, bucketCount), selector: (b) => b.bucket })
}), { minLength: 1, maxLength: 60 })

/**
 * Bursts over `bucketCount` buckets: the same 1 to 3 buckets asked up to 8 times
 * in a row (a client trying again), mostly at once, each time with new costs
 * (0 to 1.2 capacities, by tenths: rising or not) and each bucket under either
 * of its two policies (`tier`; the second one time in four).
 */
const burstsArb = (bucketCount: number): fc.Arbitrary<Step[]> => fc.array(fc.record({
  chosen: fc.uniqueArray(fc.integer({ min: 0, max: bucketCount - 1 }), { minLength: 1, maxLength: Math.min(3, bucketCount) }),
  tries: fc.array(fc.record({
    dt: fc.oneof({ weight: 2, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: dtArb }),
    buckets: fc.array(fc.record({ costShare: fc.integer({ min: 0, max: 12 }).map((tenths) => tenths / 10), tier: fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.constant(1) }) }), { minLength: 3, maxLength: 3 })
  }), { minLength: 1, maxLength: 8 })
}), { minLength: 1, maxLength: 12 }).map((bursts) => bursts.flatMap(({ chosen, tries }) =>
  tries.map(({ dt, buckets }) => ({ dt, buckets: chosen.map((bucket, k) => ({ bucket, ...buckets[k] as { costShare: number, tier: number } })) }))))

/**
 * One to three buckets, each with two policies (a user's tier before and after an
 * upgrade, say): `policies` and `others`. `sameCapacity`: the two differ in refill only.
 */
const tieredArb = (policy: fc.Arbitrary<BucketPolicy>): fc.Arbitrary<{ policies: BucketPolicy[], others: BucketPolicy[], sameCapacity: boolean }> =>
  fc.record({ policies: fc.array(policy, { minLength: 1, maxLength: 3 }), others: fc.array(policy, { minLength: 3, maxLength: 3 }), sameCapacity: fc.boolean() })
    .map(({ policies, others, sameCapacity }) => ({
      policies,
      others: policies.map((policy, i) => ({ ...others[i] as BucketPolicy, ...(sameCapacity ? { capacity: policy.capacity } : {}) })),
      sameCapacity
    }))

const costOf = (policy: BucketPolicy, share: number): number => Number((policy.capacity * share).toFixed(3))

// ------------------------------------------------------------ the reference model

/**
 * The rules written the plain way: a bucket object that starts full, gains
 * rate × elapsed seconds (never for time going backwards), is capped, and is
 * debited only when every bucket of the step can pay.
 */
class ReferenceBucket {
  level: number
  at: number | undefined
  constructor (readonly policy: BucketPolicy) { this.level = policy.capacity }
  levelAt (now: number): number {
    if (this.at === undefined) return this.policy.capacity
    const gained = now > this.at ? ((now - this.at) / 1000) * this.policy.refillPerSecond : 0
    return Math.min(this.policy.capacity, this.level + gained)
  }

  waitFor (now: number, cost: number): number {
    const missing = cost - this.levelAt(now)
    if (missing <= 0) return 0
    if (cost > this.policy.capacity || this.policy.refillPerSecond === 0) return Infinity
    const behind = this.at !== undefined && this.at > now ? this.at - now : 0
    return behind + (missing / this.policy.refillPerSecond) * 1000
  }
}

const close = (a: number, b: number): boolean => a === b || Math.abs(a - b) <= 1e-9 * Math.max(1, Math.abs(a), Math.abs(b))

t.test('the engine decides as the reference model, clock jumps included', async (t) => {
  await holds(t, 'engine = reference', fc.property(fc.array(policyArb, { minLength: 1, maxLength: 4 }), fc.integer({ min: 0, max: 1e9 }), fc.context(), (policies, start, ctx) => {
    const steps = fc.sample(stepsArb(policies.length), { seed: start, numRuns: 1 })[0] ?? []
    const reference = policies.map((policy) => new ReferenceBucket(policy))
    const states: Array<BucketState | undefined> = policies.map(() => undefined)
    let now = start
    for (const step of steps) {
      now += step.dt
      const chosen = step.buckets.map((b) => b.bucket)
      const costs = step.buckets.map((b) => costOf(policies[b.bucket] as BucketPolicy, b.costShare))
      const decision = consume(chosen.map((i) => states[i]), chosen.map((i) => policies[i] as BucketPolicy), costs, now)
      const levels = chosen.map((i) => (reference[i] as ReferenceBucket).levelAt(now))
      // A level within rounding of its cost is a tie either answer may take; elsewhere they must agree.
      const tie = levels.some((level, k) => close(level, costs[k] as number))
      const referenceAllows = levels.every((level, k) => level >= (costs[k] as number))
      if (!tie && decision.allowed !== referenceAllows) { ctx.log(`at ${now}: engine ${String(decision.allowed)}, reference ${String(referenceAllows)}`); return false }
      const wait = Math.max(...chosen.map((i, k) => (reference[i] as ReferenceBucket).waitFor(now, costs[k] as number)))
      // Times near `now` exist only to within its rounding (ulp); the engine may wait a few ulps longer, never less.
      const timeSlack = 1024 * Number.EPSILON * Math.abs(now)
      const retryOk = decision.retryAfterMs === wait || (decision.retryAfterMs >= wait - 1e-9 * wait && decision.retryAfterMs <= wait + 1e-9 * wait + timeSlack)
      if (!tie && !decision.allowed && !retryOk) { ctx.log(`retry ${decision.retryAfterMs} vs ${wait}`); return false }
      for (let k = 0; k < chosen.length; k++) {
        const expected = decision.allowed ? (levels[k] as number) - (costs[k] as number) : levels[k] as number
        if (!close(decision.tokens[k] as number, expected)) { ctx.log(`tokens ${decision.tokens[k]} vs ${expected}`); return false }
      }
      if (decision.allowed) {
        chosen.forEach((i, k) => {
          states[i] = { tokens: decision.tokens[k] as number, lastMs: now }
          const bucket = reference[i] as ReferenceBucket
          bucket.level = (levels[k] as number) - (costs[k] as number)
          bucket.at = now
        })
      }
    }
    return true
  }))
})

// ------------------------------------------------------------ invariants, through a store

/** A step as a store sees it: bucket `b` is the key `{p:<tag>}:b`, under `others[b]` for tier 1. */
const requestsOf = (policies: readonly BucketPolicy[], step: Step, tag: string, others: readonly BucketPolicy[] = []): BucketRequest[] =>
  step.buckets.map((b) => {
    const policy = (b.tier === 1 ? others[b.bucket] : policies[b.bucket]) as BucketPolicy
    return { key: `{p:${tag}}:${b.bucket}`, policy, cost: costOf(policy, b.costShare) }
  })

/** Whether two decisions are the same to the bit. */
const sameDecision = (a: BucketDecision, b: BucketDecision): boolean =>
  a.allowed === b.allowed && a.retryAfterMs === b.retryAfterMs && a.tokens.length === b.tokens.length && a.tokens.every((tokens, k) => tokens === b.tokens[k])

/** Runs steps through a store with a manual clock; returns each step's time, requests and decision. */
async function runSteps (store: Store, setNow: (ms: number) => void, policies: readonly BucketPolicy[], steps: readonly Step[], tag: string): Promise<Array<{ at: number, requests: BucketRequest[], decision: StoreDecision }>> {
  let now = 1_000_000
  const out = []
  for (const step of steps) {
    now += step.dt
    setNow(now)
    const requests = requestsOf(policies, step, tag)
    out.push({ at: now, requests, decision: await store.consume(requests) })
  }
  return out
}

function clockedMemory (): { store: Store, set: (ms: number) => void } {
  let now = 0
  return { store: memoryStore({ clock: () => now }), set: (ms) => { now = ms } }
}

t.test('over any window of t seconds a bucket spends at most B + R·t', async (t) => {
  await holds(t, 'window bound', fc.asyncProperty(policyArb, stepsArb(1, true), async (policy, steps) => {
    const { store, set } = clockedMemory()
    const log = await runSteps(store, set, [policy], steps, 'w')
    const spent = log.filter((entry) => entry.decision.allowed)
    for (let i = 0; i < spent.length; i++) {
      let sum = 0
      for (let j = i; j < spent.length; j++) {
        sum += spent[j]!.requests[0]!.cost
        const windowS = (spent[j]!.at - spent[i]!.at) / 1000
        if (sum > policy.capacity + policy.refillPerSecond * windowS + 1e-6) return false
      }
    }
    return true
  }))
})

t.test('a clock going backwards adds nothing', async (t) => {
  await holds(t, 'no tokens from a backward jump', fc.property(policyArb, fc.double({ min: 0, max: 1, noNaN: true }), fc.integer({ min: 1, max: 10_000 }), (policy, share, back) => {
    const cost = costOf(policy, share)
    const first = consume([undefined], [policy], [cost], 50_000)
    if (!first.allowed) return true
    const state = { tokens: first.tokens[0] as number, lastMs: 50_000 }
    const later = consume([state], [policy], [0], 50_000 - back)
    return later.tokens[0] === state.tokens
  }))
})

t.test('a refusal changes nothing: the same steps decide the same with refused probes in between', async (t) => {
  await holds(t, 'refusals are free', fc.asyncProperty(fc.array(policyArb, { minLength: 1, maxLength: 3 }), fc.integer({ min: 0, max: 1e9 }), async (policies, seed) => {
    const [steps = [], probes = []] = [fc.sample(stepsArb(policies.length), { seed, numRuns: 1 })[0], fc.sample(stepsArb(policies.length), { seed: seed + 1, numRuns: 1 })[0]]
    const plain = clockedMemory()
    const probed = clockedMemory()
    let now = 1_000_000
    for (let i = 0; i < steps.length; i++) {
      const step = steps[i] as Step
      now += step.dt
      plain.set(now)
      probed.set(now)
      const probe = probes[i]
      if (probe !== undefined) {
        const request = requestsOf(policies, probe, 'r')
        // A probe that passes is no refusal: give it to both stores, so they stay alike.
        if ((await probed.store.consume(request)).allowed) await plain.store.consume(request)
      }
      const request = requestsOf(policies, step, 'r')
      const a = await plain.store.consume(request)
      const b = await probed.store.consume(request)
      if (a.allowed !== b.allowed || a.retryAfterMs !== b.retryAfterMs || a.tokens.some((x, k) => x !== b.tokens[k])) return false
    }
    return true
  }))
})

t.test('Retry-After is never early: the same request passes when it says', async (t) => {
  await holds(t, 'retry at retryAfterMs passes', fc.asyncProperty(fc.array(policyArb, { minLength: 1, maxLength: 3 }), stepsArb(3), async (policies, steps) => {
    const { store, set } = clockedMemory()
    const used = steps.map((step) => ({ ...step, buckets: step.buckets.filter((b) => b.bucket < policies.length) })).filter((step) => step.buckets.length > 0)
    const log = await runSteps(store, set, policies, used, 'e')
    const last = log.at(-1)
    if (last === undefined || last.decision.allowed || !Number.isFinite(last.decision.retryAfterMs)) return true
    set(last.at + last.decision.retryAfterMs)
    const retry = await store.consume(last.requests)
    return retry.allowed
  }))
})

t.test('the Retry-After header is never early: a retry that many seconds later passes', async (t) => {
  await holds(t, 'Retry-After seconds suffice', fc.asyncProperty(
    fc.record({ capacity: fc.integer({ min: 1, max: 20 }), refillPerSecond: fc.oneof(fc.constantFrom(0.5, 1, 2.5, 7), fc.double({ min: 0.01, max: 50, noNaN: true })) }),
    fc.array(fc.integer({ min: 0, max: 2000 }), { minLength: 1, maxLength: 40 }),
    async (edge, gaps) => {
      let now = 0
      const app = Fastify()
      await app.register(tollgate, { store: memoryStore({ clock: () => now }), edge })
      app.get('/', async () => 'ok')
      try {
        for (const gap of gaps) {
          now += gap
          const response = await app.inject('/')
          if (response.statusCode === 200) continue
          now += Number(response.headers['retry-after']) * 1000
          if ((await app.inject('/')).statusCode !== 200) return false
        }
        return true
      } finally {
        await app.close()
      }
    }), 50)
})

t.test('several limits on one tier: each keeps its window bound B + R·t, and Retry-After is never early', async (t) => {
  const limitArb = fc.record({
    capacity: fc.integer({ min: 1, max: 20 }),
    refillPerSecond: fc.oneof(fc.constant(0), fc.constantFrom(0.5, 1, 2.5), fc.double({ min: 0.01, max: 20, noNaN: true }))
  })
  await holds(t, 'per-limit bound and retries', fc.asyncProperty(
    fc.array(limitArb, { minLength: 2, maxLength: 3 }),
    fc.array(fc.record({ gap: fc.integer({ min: 0, max: 3000 }), costShare: fc.double({ min: 0, max: 1, noNaN: true }) }), { minLength: 1, maxLength: 40 }),
    async (limits, requests) => {
      let now = 0
      const named = limits.map((limit, i) => ({ name: `l${i}`, ...limit }))
      const smallest = Math.min(...limits.map((limit) => limit.capacity))
      const app = Fastify()
      await app.register(tollgate, { store: memoryStore({ clock: () => now }), app: { tiers: { default: named }, identify: () => ({ id: 'u' }) } })
      app.get('/', { config: { rateLimit: { cost: (request) => Number(request.headers['x-cost']) } } }, async () => 'ok')
      const spent: Array<{ at: number, cost: number }> = []
      try {
        for (const { gap, costShare } of requests) {
          now += gap
          const cost = Math.floor(costShare * smallest)
          const send = async (): Promise<LightMyRequestResponse> => app.inject({ url: '/', headers: { 'x-cost': String(cost) } })
          const response = await send()
          if (response.statusCode !== 200) {
            const retry = response.headers['retry-after']
            if (retry === undefined) continue // a bucket that never refills: no retry time to check
            now += Number(retry) * 1000
            if ((await send()).statusCode !== 200) return false
          }
          spent.push({ at: now, cost })
        }
        for (const limit of limits) {
          for (let i = 0; i < spent.length; i++) {
            let sum = 0
            for (let j = i; j < spent.length; j++) {
              sum += (spent[j] as { cost: number }).cost
              const windowS = ((spent[j] as { at: number }).at - (spent[i] as { at: number }).at) / 1000
              if (sum > limit.capacity + limit.refillPerSecond * windowS + 1e-6) return false
            }
          }
        }
        return true
      } finally {
        await app.close()
      }
    }), 60)
})

t.test('differential: the memory store and the Redis script decide alike on random sequences', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const client = server.client(t)
  let now = 0
  // A generous timeoutMs: a busy machine must not turn a slow reply into a local decision.
  const redis = redisStore({ client, clock: () => now, heartbeatIntervalMs: 0, timeoutMs: 5000, denyCacheSize: 0 })
  t.teardown(() => redis.close())
  let run = 0
  await holds(t, 'memory = Redis', fc.asyncProperty(fc.array(policyArb, { minLength: 1, maxLength: 4 }), fc.integer({ min: 0, max: 1e9 }), async (policies, seed) => {
    const steps = fc.sample(stepsArb(policies.length), { seed, numRuns: 1 })[0] ?? []
    const memory = clockedMemory()
    const tag = `d${run++}`
    const fromMemory = await runSteps(memory.store, memory.set, policies, steps, tag)
    const fromRedis = await runSteps(redis, (ms) => { now = ms }, policies, steps, tag)
    return fromMemory.every((entry, i) => sameDecision(entry.decision, (fromRedis[i] as typeof entry).decision))
  }), 60)
})

t.test('differential: with the deny cache on, Redis decides as without it and as memory, as tiers change, costs rise and bursts go at once', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const client = server.client(t)
  let now = 0
  const clock = (): number => now
  const cached = redisStore({ client, clock, heartbeatIntervalMs: 0, timeoutMs: 5000, prefix: 'cached:' })
  const plain = redisStore({ client, clock, heartbeatIntervalMs: 0, timeoutMs: 5000, denyCacheSize: 0, prefix: 'plain:' })
  t.teardown(async () => { await cached.close(); await plain.close() })
  let run = 0
  let fromCache = 0
  await holds(t, 'deny cache on = off = memory', fc.asyncProperty(tieredArb(policyArb), fc.integer({ min: 0, max: 1e9 }), fc.context(), async ({ policies, others, sameCapacity }, seed, ctx) => {
    const steps = fc.sample(burstsArb(policies.length), { seed, numRuns: 1 })[0] ?? []
    const memory = memoryStore({ clock })
    const tag = `t${run++}`
    now = 1_000_000
    try {
      // Steps at the same moment go to the cached store at once (a client's burst: some on
      // their way to Redis while the cache answers others), to the other two one by one.
      for (let i = 0; i < steps.length;) {
        now += (steps[i] as Step).dt
        let end = i + 1
        while (end < steps.length && (steps[end] as Step).dt === 0) end++
        const requests = steps.slice(i, end).map((step) => requestsOf(policies, step, tag, others))
        const answers = requests.map((request) => cached.consume(request))
        fromCache += answers.filter((answer) => !(answer instanceof Promise)).length
        const withCache = await Promise.all(answers.map(async (answer) => answer))
        for (const [k, request] of requests.entries()) {
          const without = await plain.consume(request)
          const inMemory = memory.consume(request)
          // A bucket full under one tier is deleted in Redis and kept in memory: alike only while the capacity stays.
          if (!sameDecision(withCache[k] as StoreDecision, without) || (sameCapacity && !sameDecision(inMemory, without))) {
            ctx.log(`step ${i + k}: ${JSON.stringify(request)}: cached ${JSON.stringify(withCache[k])}, Redis ${JSON.stringify(without)}, memory ${JSON.stringify(inMemory)}`)
            return false
          }
        }
        i = end
      }
      return true
    } finally {
      memory.close()
    }
  }), 60)
  t.ok(fromCache >= 100, `${fromCache} refusals answered by the deny cache`)
})

t.test('the deny cache never refuses what Redis would admit, nor gives an early wait: real time, keys that expire', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const client = server.client(t)
  // Redis time: a bucket that never refills expires 40 ms after its last step.
  const store = redisStore({ client, heartbeatIntervalMs: 0, timeoutMs: 5000, neverFullTtlMs: 40 })
  t.teardown(() => store.close())
  /** What Redis holds, read at once: its time (ms), then each key's "<tokens> <last ms>" ('' when absent). */
  const read = `local time = redis.call('TIME')
local out = { string.format('%.17g', tonumber(time[1]) * 1000 + tonumber(time[2]) / 1000) }
for i, k in ipairs(KEYS) do out[i + 1] = redis.call('GET', k) or '' end
return out`
  const realPolicyArb = fc.record({ capacity: fc.integer({ min: 1, max: 10 }), refillPerSecond: fc.constantFrom(0, 0, 0.5, 5, 40) })
  const pausesArb = fc.array(fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: fc.integer({ min: 5, max: 50 }) }), { minLength: 20, maxLength: 20 })
  let run = 0
  let fromCache = 0
  await holds(t, 'cached refusals are Redis refusals, with waits never early', fc.asyncProperty(tieredArb(realPolicyArb), pausesArb, fc.integer({ min: 0, max: 1e9 }), fc.context(), async ({ policies, others }, pauses, seed, ctx) => {
    const steps = (fc.sample(burstsArb(policies.length), { seed, numRuns: 1 })[0] ?? []).slice(0, pauses.length)
    const tag = `r${run++}`
    for (const [i, step] of steps.entries()) {
      if ((pauses[i] as number) > 0) await new Promise((resolve) => setTimeout(resolve, pauses[i]))
      const requests = requestsOf(policies, step, tag, others)
      // Redis can only give more from here on (refill, expiry): what it would admit now, it admits later.
      const readAt = performance.now()
      const [time, ...stored] = await client.eval(read, requests.length, ...requests.map((request) => `tollgate:${request.key}`)) as string[]
      const states = stored.map((text): BucketState | undefined => {
        const [tokens, lastMs] = text.split(' ').map(Number) as [number, number]
        return text === '' ? undefined : { tokens, lastMs }
      })
      const truth = consume(states, requests.map((request) => request.policy), requests.map((request) => request.cost), Number(time))
      const answer = store.consume(requests)
      const answeredAt = performance.now()
      if (answer instanceof Promise) {
        await answer
        continue
      }
      fromCache++
      // The cache's retry moment must not come before the one Redis's state gives (read no earlier than readAt).
      if (truth.allowed || answeredAt + answer.retryAfterMs < readAt + truth.retryAfterMs) {
        ctx.log(`step ${i}: ${JSON.stringify(requests)}: cached ${JSON.stringify(answer)}, Redis held ${JSON.stringify(stored)}: ${JSON.stringify(truth)}`)
        return false
      }
    }
    return true
  }), 30)
  t.ok(fromCache >= 50, `${fromCache} refusals answered by the deny cache`)
})

// ------------------------------------------------------------ exact waits of a quota of max per seconds

/**
 * A quota of `max` per `seconds` (`per(max, 'n seconds')`: capacity max, refill
 * max / seconds, a fraction), drained at `start` (a time of day in ms), then asked
 * `cost` tokens `dt` ms later. `dt` is mostly chosen so that the exact wait is a
 * whole number of seconds (`wait`), or 0 (the exact due time); else any.
 */
interface Quota { max: number, seconds: number, start: number, cost: number, dt: number }
const quotaArb: fc.Arbitrary<Quota> = fc.record({
  max: fc.oneof(fc.integer({ min: 1, max: 12 }), fc.integer({ min: 1, max: 100 })),
  seconds: fc.oneof(fc.integer({ min: 1, max: 20 }), fc.constantFrom(60, 3600, 86_400), fc.integer({ min: 1, max: 3600 })),
  start: fc.oneof(fc.constant(0), fc.integer({ min: 1_700_000_000_000, max: 1_900_000_000_000 })),
  costShare: fc.double({ min: 0, max: 1, noNaN: true }),
  wait: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 30 })),
  anyDt: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.double({ min: 0, max: 1.2, noNaN: true }) })
}).map(({ max, seconds, start, costShare, wait, anyDt }) => {
  const cost = 1 + Math.floor(costShare * (max - 1))
  // The exact time (ms) the drained bucket holds `cost`: cost × seconds × 1000 / max, whole or not.
  const dueMs = cost * seconds * 1000 / max
  const wanted = dueMs - Math.min(wait, Math.floor(dueMs / 1000)) * 1000
  const dt = anyDt === undefined && Number.isInteger(wanted) ? wanted : Math.round((anyDt ?? 1) * seconds * 1000)
  return { max, seconds, start, cost, dt }
})

/**
 * On `store` (clock set by `setNow`), the quota drained, then `cost` asked `dt` ms
 * later, decides as exact (rational) arithmetic says: allowed when the exact
 * level holds the cost; else Retry-After is the exact wait rounded up (a whole
 * wait exactly that, never one more), and a retry at now + retryAfterMs passes.
 * The headers' whole tokens and seconds until full are the exact ones too.
 */
function exactWaits (store: Store, setNow: (ms: number) => void, tag: string): fc.IAsyncPropertyWithHooks<[Quota, fc.ContextValue]> {
  let run = 0
  return fc.asyncProperty(quotaArb, fc.context(), async ({ max, seconds, start, cost, dt }, ctx) => {
    const policy: BucketPolicy = { capacity: max, refillPerSecond: max / seconds }
    const key = `{x:${tag}${run++}}:q`
    setNow(start)
    if (!(await store.consume([{ key, policy, cost: max }])).allowed) return false
    setNow(start + dt)
    const decision = await store.consume([{ key, policy, cost }])
    // In thousandths of a token-second: the level, the cost, the capacity (integers; exact).
    const level = Math.min(max * seconds * 1000, dt * max)
    const allowed = level >= cost * seconds * 1000
    const left = allowed ? level - cost * seconds * 1000 : level
    const member = stateMember(namedPolicy('q', policy), decision.tokens[0] as number)
    const expected = `"q";r=${Math.floor(left / (seconds * 1000))};t=${Math.ceil((max * seconds * 1000 - left) / (max * 1000))}`
    ctx.log(`max ${max} per ${seconds} s, cost ${cost} at +${dt} ms: ${JSON.stringify(decision)}, ${member}`)
    if (decision.allowed !== allowed || member !== expected) return false
    if (allowed) return true
    const exactSeconds = Math.ceil((cost * seconds * 1000 - dt * max) / (max * 1000))
    if (retryAfterSeconds(decision.retryAfterMs) !== exactSeconds) return false
    setNow(start + dt + decision.retryAfterMs)
    return (await store.consume([{ key, policy, cost }])).allowed
  })
}

t.test('exact waits: a quota of max per seconds waits exactly the whole seconds due, and a retry then passes (memory)', async (t) => {
  const { store, set } = clockedMemory()
  await holds(t, 'exact Retry-After and t=', exactWaits(store, set, 'm'), RUNS * 5)
})

t.test('exact waits: the same on the Redis store, its deny cache on', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const client = server.client(t)
  let now = 0
  const redis = redisStore({ client, clock: () => now, heartbeatIntervalMs: 0, timeoutMs: 5000 })
  t.teardown(() => redis.close())
  await holds(t, 'exact Retry-After and t= (Redis)', exactWaits(redis, (ms) => { now = ms }, 'r'), 150)
})
