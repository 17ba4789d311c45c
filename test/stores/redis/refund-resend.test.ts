/**
 * A refund whose reply a dropped connection lost: ioredis (default options)
 * sends the call again once it reconnects, and Redis applies it once (its id,
 * bucket.lua). A real redis-server, behind a proxy that drops the client's
 * connection instead of passing on the reply to the first refund.
 */
import t from 'tap'
import { connect, createServer, type Socket } from 'node:net'
import type { AddressInfo } from 'node:net'
import { Redis } from 'ioredis'
import { redisStore } from '../../../lib/index.js'
import { requireRedis, startRedis } from '../../redis-server.js'

/** A proxy to `port` that drops the connection in place of the reply to the first call naming `word`. */
async function dropFirstReplyTo (port: number, word: string): Promise<{ port: number, dropped: () => boolean, close: () => Promise<void> }> {
  let state: 'waiting' | 'dropping' | 'dropped' = 'waiting'
  const sockets = new Set<Socket>()
  const server = createServer((down) => {
    const up = connect(port, '127.0.0.1')
    for (const socket of [down, up]) {
      sockets.add(socket)
      socket.on('error', () => {})
      socket.on('close', () => { sockets.delete(socket); down.destroy(); up.destroy() })
    }
    down.on('data', (chunk: Buffer) => {
      if (state === 'waiting' && chunk.includes(word)) state = 'dropping'
      up.write(chunk)
    })
    up.on('data', (chunk: Buffer) => {
      if (state === 'dropping') {
        state = 'dropped'
        down.destroy()
        return
      }
      down.write(chunk)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    port: (server.address() as AddressInfo).port,
    dropped: () => state === 'dropped',
    close: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => server.close(resolve))
    }
  }
}

if (requireRedis(t)) {
  t.test('a refund re-sent after its reply was lost is applied once', async (t) => {
    const server = await startRedis(t)
    const proxy = await dropFirstReplyTo(server.port, 'refund')
    t.teardown(proxy.close)
    // ioredis's defaults (a command unanswered when the connection drops is sent again), reconnecting at once.
    const client = new Redis({ port: proxy.port, host: '127.0.0.1', retryStrategy: () => 20 })
    client.on('error', () => {})
    t.teardown(() => { client.disconnect() })
    const store = redisStore({ client, timeoutMs: 2000, heartbeatIntervalMs: 0, denyCacheSize: 0 })
    t.teardown(() => store.close())
    await store.ready()
    const bucket = { key: '{user:1}:app', policy: { capacity: 10, refillPerSecond: 0 }, cost: 1 }
    for (let i = 0; i < 8; i++) await store.consume([bucket])
    t.equal(await store.refund(bucket), 3, 'one token back: 3 of 10')
    t.ok(proxy.dropped(), 'the reply to the refund was lost, and the call sent again')
    const direct = server.client(t)
    t.equal((await direct.get('tollgate:{user:1}:app'))?.split(' ')[0], '3', 'Redis holds 3 tokens, not 4')
    const marks = await direct.keys('tollgate:{user:1}:app~refund:*')
    t.equal(marks.length, 1, 'the refund\'s id is remembered, on the bucket\'s hash tag')
    t.ok(await direct.pttl(marks[0] as string) > 0, 'for a while')
    t.equal(await store.refund(bucket), 4, 'another refund is another id: applied')
  })
}
