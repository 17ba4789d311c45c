import t from 'tap'
import { Agent, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { FastifyRequest } from 'fastify'
import { ofClientAddress, MAX_CACHED_INPUT_LENGTH, MAX_CACHED_RESULTS, memoize } from '../../lib/layers/key-cache.js'
import { buildApp } from '../helpers.js'

t.test('memoize: one computation per input, bounded; long inputs computed each time', async (t) => {
  const computed: string[] = []
  const keyOf = memoize((input) => { computed.push(input); return `{k:${input}}` })
  t.equal(keyOf('a'), '{k:a}')
  t.equal(keyOf('a'), '{k:a}')
  t.same(computed, ['a'], 'a repeated input is computed once')
  for (let i = 0; i < MAX_CACHED_RESULTS; i++) keyOf(`other-${i}`)
  computed.length = 0
  t.equal(keyOf('a'), '{k:a}', 'the same result after the cache started over')
  t.same(computed, ['a'], 'computed again: the cache holds at most MAX_CACHED_RESULTS')
  const long = 'x'.repeat(MAX_CACHED_INPUT_LENGTH + 1)
  keyOf(long)
  keyOf(long)
  t.same(computed, ['a', long, long], 'an input above MAX_CACHED_INPUT_LENGTH is not kept')
})

t.test('ofClientAddress: per connection without trustProxy, per request with it', async (t) => {
  const keyOf = (ip: string): string => `{ip:${ip === '' ? 'unknown' : ip}}`
  const socket = {}
  const from = (ip: string | undefined, on: object | null = socket) => ({ ip, raw: { socket: on } }) as unknown as FastifyRequest
  const perRequest = ofClientAddress(keyOf, false)
  t.equal(perRequest(from('203.0.113.1')), '{ip:203.0.113.1}')
  t.equal(perRequest(from('203.0.113.2')), '{ip:203.0.113.2}', 'trustProxy: one connection may carry several clients')
  t.equal(perRequest(from(undefined)), '{ip:unknown}', 'request.ip is undefined once the socket is gone')
  const perConnection = ofClientAddress(keyOf, true)
  t.equal(perConnection(from('203.0.113.1')), '{ip:203.0.113.1}')
  t.equal(perConnection(from('203.0.113.1', {})), '{ip:203.0.113.1}', 'another connection from the same address')
  t.equal(perConnection(from('198.51.100.7', {})), '{ip:198.51.100.7}')
  t.equal(perConnection(from('198.51.100.7', null)), '{ip:198.51.100.7}', 'no socket: read from the request')
})

/** Statuses of `count` requests sent one after another over one keep-alive connection. */
async function overOneConnection (port: number, headers: Array<Record<string, string>>): Promise<number[]> {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 })
  const sockets = new Set<unknown>()
  const codes: number[] = []
  for (const sent of headers) {
    codes.push(await new Promise<number>((resolve, reject) => {
      const req = request({ port, host: '127.0.0.1', path: '/', agent, headers: sent }, (res) => {
        sockets.add(res.socket)
        res.resume()
        res.on('end', () => { resolve(res.statusCode as number) })
      })
      req.on('error', reject)
      req.end()
    }))
  }
  agent.destroy()
  if (sockets.size !== 1) throw new Error(`expected one connection, got ${sockets.size}`)
  return codes
}

const layers = {
  edge: { edge: { capacity: 1, refillPerSecond: 0 } },
  app: { app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } } } }
}

for (const [layer, options] of Object.entries(layers)) {
  t.test(`${layer}: with trustProxy, each client behind one proxy connection has its own bucket`, async (t) => {
    const { app } = await buildApp(options, { trustProxy: '127.0.0.1' })
    app.get('/', async () => 'ok')
    await app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = app.server.address() as AddressInfo
    const clients = ['203.0.113.1', '203.0.113.2', '203.0.113.1'].map((ip) => ({ 'x-forwarded-for': ip }))
    t.same(await overOneConnection(port, clients), [200, 200, 429])
    await app.close()
  })

  t.test(`${layer}: without trustProxy, the connection's address is the key, on every connection`, async (t) => {
    const { app } = await buildApp(options, { trustProxy: false })
    app.get('/', async () => 'ok')
    await app.listen({ port: 0, host: '127.0.0.1' })
    const { port } = app.server.address() as AddressInfo
    t.same(await overOneConnection(port, [{}, { 'x-forwarded-for': '203.0.113.9' }]), [200, 429], 'X-Forwarded-For changes nothing')
    t.same(await overOneConnection(port, [{}]), [429], 'a new connection from the same address shares the bucket')
    await app.close()
  })
}
