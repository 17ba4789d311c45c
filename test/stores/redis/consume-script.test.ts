import t from 'tap'
import type { Pending } from '../../../lib/stores/redis/batcher.js'
import { parseReply } from '../../../lib/stores/redis/consume-script.js'
import type { BucketRequest } from '../../../lib/types/store.js'

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
