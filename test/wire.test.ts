/**
 * Validation creates nothing: the options become a plain plan, and the runtime
 * (timers, stores, the settling edge) is made only once every option has passed.
 */
import t from 'tap'
import { createHook } from 'node:async_hooks'
import Fastify from 'fastify'
import tollgate, { type Store } from '../lib/index.js'

/** A store the replicas share (a custom one, to the Store contract), as `edge.mode: 'settle'` needs. */
function sharedStore (): Store {
  return {
    liveReplicas: 3,
    consume: () => ({ allowed: true, tokens: [1], retryAfterMs: 0 }),
    settle: async (debits) => debits.map(() => ({ tokens: 1, reserved: 0 })),
    close: () => {}
  }
}

/** Timers (setTimeout, setInterval) made since `watch()` and not cleared or run out: the live ones' count. */
function watch (): { live: () => number, stop: () => void } {
  const live = new Set<number>()
  const hook = createHook({
    init (id, type) { if (type === 'Timeout') live.add(id) },
    destroy (id) { live.delete(id) }
  }).enable()
  return { live: () => live.size, stop: () => { hook.disable() } }
}

/** Lets the timers cleared so far report it (async_hooks' destroy comes after the clear). */
const settle = async (): Promise<void> => { await new Promise((resolve) => setImmediate(resolve)) }

t.test('a valid edge.mode: settle followed by an invalid app.tiers leaves no timer behind', async (t) => {
  const timers = watch()
  const app = Fastify()
  await t.rejects(async () => app.register(tollgate, {
    store: sharedStore(),
    edge: { capacity: 10, refillPerSecond: 1, mode: 'settle' },
    app: { tiers: { gold: { capacity: 1, refillPerSecond: 1 } } as never }
  }), { code: 'TOLLGATE_INVALID_OPTION' })
  await settle()
  t.equal(timers.live(), 0, 'no timer was left running')
  timers.stop()
  await app.close()
})

t.test('the same options, valid, start the settle timer, and close() stops it', async (t) => {
  const timers = watch()
  const app = Fastify()
  await app.register(tollgate, {
    store: sharedStore(),
    edge: { capacity: 10, refillPerSecond: 1, mode: 'settle' },
    app: { tiers: { default: { capacity: 1, refillPerSecond: 1 } } }
  })
  t.ok(timers.live() >= 1, 'the settle timer runs')
  await app.close()
  await settle()
  t.equal(timers.live(), 0, 'and stops with the app')
  timers.stop()
})
