// Settlement entries per request under `edge.mode: 'settle'`, for bench/sizing.js:
// two replicas (two apps, each with its own client and store) on one Redis, the
// edge alone, clients sending as the model assumes. Each entry of a settlement
// reads its bucket once (GET), and in this set-up nothing else runs GET, so
// INFO commandstats' GET calls over the requests are the entries per request.
import Fastify from 'fastify'
import { Redis } from 'ioredis'
import { sleep } from '../build/test/redis-server.js'

const { default: tollgate, redisStore } = await import('fastify-tollgate')

/** An edge bucket of 100 refilling 100 a second: a busy client below (100 a second) is never refused, a trickle's token is back within 10 ms. */
const EDGE = { capacity: 100, refillPerSecond: 100, mode: 'settle' }

async function replica (port) {
  const client = new Redis({ port, host: '127.0.0.1' })
  const app = Fastify()
  await app.register(tollgate, { store: redisStore({ client }), edge: EDGE })
  app.get('/', async () => 'ok')
  await app.ready()
  return { app, client }
}

const ask = (replica, ip) => replica.app.inject({ url: '/', remoteAddress: ip })

/**
 * Clients at a trickle: `clients` addresses, each one request, to the replicas in
 * turn, `perTick` requests every 10 ms; then time for their reservations to go back.
 */
async function trickle (replicas, clients, perTick) {
  for (let i = 0; i < clients; i += perTick) {
    await Promise.all(Array.from({ length: Math.min(perTick, clients - i) }, (_, j) => ask(replicas[(i + j) % 2], `198.51.${((i + j) >> 8) & 255}.${(i + j) & 255}`)))
    await sleep(10)
  }
  return clients
}

/** Busy clients: `clients` addresses, each pinned to a replica, `burst` requests each every 100 ms, `rounds` times. */
async function busy (replicas, clients, burst, rounds) {
  for (let round = 0; round < rounds; round++) {
    await Promise.all(Array.from({ length: clients * burst }, (_, n) => ask(replicas[n % clients % 2], `203.0.113.${n % clients}`)))
    await sleep(100)
  }
  return clients * burst * rounds
}

/** The traffic shapes: what each stands for, and how it sends. */
export const SETTLE_SHAPES = {
  trickle: { text: '2 000 clients, one request each, spread over the two replicas', send: (replicas) => trickle(replicas, 2000, 20) },
  busy: { text: '20 clients, each 10 requests every 100 ms to one replica, 20 times', send: (replicas) => busy(replicas, 20, 10, 20) }
}

/** Entries per request for each shape of SETTLE_SHAPES: GET calls over the requests, settlements and returns included. */
export async function settlementEntries (admin, port) {
  const entries = {}
  for (const [name, { send }] of Object.entries(SETTLE_SHAPES)) {
    await admin.flushall()
    const replicas = [await replica(port), await replica(port)]
    await sleep(300)
    await admin.config('RESETSTAT')
    const requests = await send(replicas)
    await sleep(1500) // the last settlements, and the reservations given back once the buckets are full again
    const gets = Number(/^cmdstat_get:calls=(\d+)/m.exec(await admin.info('commandstats'))?.[1] ?? 0)
    for (const { app, client } of replicas) {
      await app.close()
      client.disconnect()
    }
    entries[name] = gets / requests
  }
  return entries
}
