import t from 'tap'
import { defineScripts } from '../../../lib/stores/redis/scripts.js'
import { parseNumber } from '../../../lib/stores/redis/reply.js'
import { requireRedis, startRedis } from '../../redis-server.js'

/** Redis `TIME` in ms, as a number. */
const redisMs = (time: readonly unknown[]): number => Number(time[0]) * 1000 + Number(time[1]) / 1000

/** The consume script's reply, one string (bytes: the store calls it through ioredis's Buffer variant), as its values. */
const texts = (reply: unknown): string[] => String(reply).split(' ')

if (requireRedis(t)) {
  t.test('on Redis\'s clock the time is written as ms with its µs, and reads back as the very time the script used', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const { consume } = defineScripts(client, false)
    // One decision of one bucket: 1000 tokens, 1000 a second (one a ms), cost 1000; now from Redis TIME (null).
    const call = async (): Promise<string[]> => texts(await consume.call(client, 1, '{t}:k', '[null,86400000,0,1,0,1,1000,1000,1,1,1000]'))
    const before = redisMs(await client.time())
    t.same(await call(), ['1', '0', '0'], 'the first takes every token')
    const stored = await client.get('{t}:k')
    t.match(stored, /^0 \d+\.\d{3}$/, 'stored as "<tokens> <ms>.<µs>"')
    const writtenAt = String(stored).split(' ')[1] as string
    const refused = await call()
    const after = redisMs(await client.time())
    t.equal(refused[0], '0', 'the second, less than a second later, is refused')
    t.equal(refused.length, 7, 'allowed, retry, tokens, the time, then the bucket\'s tokens, last step and TTL')
    const [, , tokens, now, held, lastMs] = refused as [string, string, string, string, string, string]
    t.match(now, /^\d+\.\d{3}$/, 'the refusal\'s time has the same form')
    t.ok(parseNumber(writtenAt) >= before - 1 && parseNumber(now) <= after + 1, 'both are Redis\'s time')
    t.same([parseNumber(held), parseNumber(lastMs)], [0, parseNumber(writtenAt)], 'the refusal shows the stored state')
    // One token a ms from 0: the tokens are the elapsed ms, computed from the script's own times. They equal
    // the difference of the two texts only if each text parses back to exactly the time the script used.
    t.equal(parseNumber(tokens), parseNumber(now) - parseNumber(writtenAt), 'the tokens refilled between the two texts')
  })

  t.test('whole numbers are written as integers, others with 17 significant digits', async (t) => {
    const server = await startRedis(t)
    const client = server.client(t)
    const { consume } = defineScripts(client, false)
    // Test clock (now given, fixed TTL): a bucket of 10 refilling 1 a second, at t = 1000.5 ms then 1100.5 ms.
    const call = async (now: number, cost: number): Promise<string[]> =>
      texts(await consume.call(client, 1, '{n}:k', `[${now},60000,1,1,0,1,10,1,1,1,${cost}]`))
    t.same(await call(1000.5, 3), ['1', '0', '7'])
    t.equal(await client.get('{n}:k'), '7 1000.5')
    t.same(await call(1100.5, 1), ['1', '0', '6.0999999999999996'], '7 + 0.1 − 1, as %.17g prints it')
    t.equal(await client.get('{n}:k'), '6.0999999999999996 1100.5')
  })
}
