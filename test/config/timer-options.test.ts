import t from 'tap'
import { memoryStore, redisStore, type RedisClientLike } from '../../lib/index.js'
import { MAX_TIMER_MS } from '../../lib/config/check.js'

const THIRTY_DAYS_MS = 30 * 86_400_000

/** A client whose every script call fails at once: no Redis needed to build a store. */
function offlineClient (): RedisClientLike {
  const client: Record<string, unknown> = {
    defineCommand (name: string) {
      client[name] = async () => { throw new Error('offline') }
    }
  }
  return client as unknown as RedisClientLike
}

const timers: Array<{ store: 'memoryStore' | 'redisStore', option: string, min: number, integer: boolean }> = [
  { store: 'memoryStore', option: 'sweepIntervalMs', min: 1, integer: true },
  { store: 'redisStore', option: 'timeoutMs', min: 1, integer: false },
  { store: 'redisStore', option: 'heartbeatIntervalMs', min: 0, integer: true },
  { store: 'redisStore', option: 'probeIntervalMs', min: 1, integer: false },
  { store: 'redisStore', option: 'connectWaitMs', min: 0, integer: false }
]

function build (store: 'memoryStore' | 'redisStore', option: string, value: number): { close (): unknown } {
  return store === 'memoryStore'
    ? memoryStore({ [option]: value })
    : redisStore({ client: offlineClient(), heartbeatIntervalMs: 0, [option]: value })
}

t.test('a timer option above 2^31 − 1 ms (which Node would run every 1 ms) fails at startup, naming option, value and bound', async (t) => {
  t.equal(MAX_TIMER_MS, 2_147_483_647)
  for (const { store, option, min, integer } of timers) {
    const kind = integer ? 'an integer' : 'a number'
    const message = new RegExp(`Expected \`${store}\\.${option}\` to be ${kind} of ms from ${min} to 2147483647 \\(the longest delay of a Node timer\\), got \`${THIRTY_DAYS_MS}\` \\(number\\)`)
    t.throws(() => build(store, option, THIRTY_DAYS_MS), { code: 'TOLLGATE_INVALID_OPTION', message }, `${store}.${option}: 30 days`)
    t.throws(() => build(store, option, MAX_TIMER_MS + 1), { code: 'TOLLGATE_INVALID_OPTION' }, `${store}.${option}: 2^31 ms`)
    t.throws(() => build(store, option, min - 1), { code: 'TOLLGATE_INVALID_OPTION' }, `${store}.${option}: below ${min}`)
    if (integer) t.throws(() => build(store, option, 1.5), { code: 'TOLLGATE_INVALID_OPTION' }, `${store}.${option}: an integer`)
    const longest = build(store, option, MAX_TIMER_MS)
    t.pass(`${store}.${option}: 2^31 − 1 ms is accepted`)
    await longest.close()
  }
})
