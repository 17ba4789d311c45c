import t from 'tap'
import type { Pending } from '../../../lib/stores/redis/batcher.js'
import { callScript, consumeCallOptions, parseReply } from '../../../lib/stores/redis/consume-script.js'
import { defineScripts } from '../../../lib/stores/redis/scripts.js'
import type { BucketPolicy } from '../../../lib/types/engine.js'
import type { BucketRequest } from '../../../lib/types/store.js'
import { requireRedis, startRedis } from '../../redis-server.js'

/** A batch of decisions of `counts[i]` buckets each (only their count matters to the reply). */
const batch = (...counts: number[]): Pending[] => counts.map((count) => ({
  buckets: Array.from({ length: count }, (_, i): BucketRequest => ({ key: `k${i}`, policy: { capacity: 10, refillPerSecond: 1 }, cost: 1 })),
  resolve () {},
  reject () {}
}))

t.test('the reply, one string of values, is read in order: per decision its outcome, then a refusal\'s details', async (t) => {
  // Allowed (7 left); refused (retry 1500.25 ms) with its time and a present then an absent bucket; allowed.
  const reply = '1 0 7 0 1500.25 0.5 -2 1000.5 3 900.5 60000 - 1 0 6.0999999999999996'
  for (const form of [reply, Buffer.from(reply)]) {
    t.same(parseReply(form, batch(1, 2, 1)), [
      { decision: { allowed: true, tokens: [7], retryAfterMs: 0 }, refusal: undefined },
      {
        decision: { allowed: false, tokens: [0.5, -2], retryAfterMs: 1500.25 },
        refusal: { atMs: 1000.5, buckets: [{ tokens: 3, lastMs: 900.5, ttlMs: 60_000 }, undefined] }
      },
      { decision: { allowed: true, tokens: [6.0999999999999996], retryAfterMs: 0 }, refusal: undefined }
    ], typeof form === 'string' ? 'as text' : 'as bytes')
  }
  t.same(parseReply('0 inf -0.5 1000 -0.5 1000 inf', batch(1))[0]?.refusal?.buckets, [{ tokens: -0.5, lastMs: 1000, ttlMs: Infinity }],
    'a key without TTL (inf), a bucket in debt')
})

t.test('a reply that is not what the batch asked for is refused', async (t) => {
  const unreadable = /unexpected reply from the Redis script/
  t.throws(() => parseReply('1 0', batch(1)), unreadable, 'fewer values than decisions')
  t.throws(() => parseReply('1 0 7 1 0 7', batch(1)), unreadable, 'more values than decisions')
  t.throws(() => parseReply('1 0 x', batch(1)), unreadable, 'a value that is no number')
  t.throws(() => parseReply('1  0 7', batch(1)), unreadable, 'an empty value')
  t.throws(() => parseReply('0 5 0 1000 -x', batch(1)), unreadable, 'a dash that is no absent bucket')
  t.throws(() => parseReply(['1', '0', '7'], batch(1)), unreadable, 'several values (the reply of another layout)')
})

if (requireRedis(t)) {
  t.test('a call of one decision reuses the last one\'s numbers only under the same policies and costs', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const options = consumeCallOptions({ client, command: defineScripts(client, false).consume, cluster: false, prefix: 'm:', neverFullTtlMs: 60_000, clock: undefined })
    const a: BucketPolicy = { capacity: 100, refillPerSecond: 0 }
    const b: BucketPolicy = { capacity: 50, refillPerSecond: 0 }
    /** Each decision's buckets as [key, policy, cost]; the tokens left, per decision. */
    const call = async (...decisions: Array<Array<[string, BucketPolicy, number]>>): Promise<number[][]> => {
      const sent: Pending[] = decisions.map((buckets) => ({ buckets: buckets.map(([key, policy, cost]) => ({ key, policy, cost })), resolve () {}, reject () {} }))
      return parseReply(await callScript(options, sent), sent).map(({ decision }) => decision.tokens)
    }
    t.same(await call([['x', a, 1]]), [[99]])
    t.same(await call([['x', a, 3]]), [[96]], 'another cost')
    t.same(await call([['x', a, 3]]), [[93]], 'the same')
    t.same(await call([['y', b, 3]]), [[47]], 'another policy')
    t.same(await call([['y', { ...b }, 3]]), [[44]], 'an equal policy')
    t.same(await call([['x', a, 3], ['y', b, 3]]), [[90, 41]], 'a bucket more')
    t.same(await call([['x', a, 3]]), [[87]], 'a bucket less')
    t.same(await call([['x', a, 1]], [['y', b, 1]]), [[86], [40]], 'two decisions')
    t.same(await call([['x', a, 3]]), [[83]], 'one again')
    t.match(await client.get('m:x'), /^83 \d+\.\d{3}$/, 'stored as "<tokens> <ms>.<µs>" on Redis\'s clock')
  })
}
