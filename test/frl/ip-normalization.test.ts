/**
 * FRL's test/ip-normalization.test.js. FRL exports `normalizeIP`; here nothing
 * is exported for it, and the edge's keys show the same normalization: IPv4-mapped
 * IPv6 as IPv4, IPv6 grouped by `edge.ipv6Subnet` (default 64).
 */
import t from 'tap'
import Fastify from 'fastify'
import tollgate from '../../lib/index.js'
import { failure } from '../helpers.js'
import { frlApp } from './frl.js'

/** The edge's key of a client address, as `fastify.tollgate` names it. */
async function edgeKeyOf (ipv6Subnet: number | undefined, ip: string): Promise<string | undefined> {
  const app = Fastify()
  await app.register(tollgate, { edge: { capacity: 1, refillPerSecond: 1, ...(ipv6Subnet === undefined ? {} : { ipv6Subnet }) } })
  try {
    return (await app.tollgate.peek({ layer: 'edge', ip })).buckets[0]?.key
  } finally {
    await app.close()
  }
}

/** FRL's test server behind a proxy (FRL: `trustProxy: true`; here the proxy's address, as the README asks). */
async function behindProxy (ipv6Subnet?: number) {
  const { app } = await frlApp({ edge: { capacity: 1, refillPerSecond: 1 / 10, ...(ipv6Subnet === undefined ? {} : { ipv6Subnet }) } }, { trustProxy: '127.0.0.1' })
  app.get('/', async () => 'ok')
  const from = async (ip: string): Promise<number> => (await app.inject({ url: '/', headers: { 'x-forwarded-for': ip } })).statusCode
  return { app, from }
}

t.test('FRL: normalizeIP canonicalizes IP address strings', async (t) => {
  // Differs: no `normalizeIP` export. (FRL's `'Example.COM'` is no address: `request.ip` always is one.)
  t.equal(await edgeKeyOf(undefined, '127.0.0.1'), '{ip:127.0.0.1}:edge')
  t.equal(await edgeKeyOf(undefined, '::ffff:192.0.2.1'), '{ip:192.0.2.1}:edge')
  t.equal(await edgeKeyOf(undefined, '::ffff:c000:0201'), '{ip:192.0.2.1}:edge')
  t.equal(await edgeKeyOf(undefined, '2001:0DB8:ABCD:0012:0000:0000:0000:0001'), '{ip:2001:db8:abcd:12::/64}:edge')
  t.equal(await edgeKeyOf(48, '2001:db8:abcd:12::1'), '{ip:2001:db8:abcd::/48}:edge')
  t.equal(await edgeKeyOf(128, '2001:db8:abcd:12::1'), '{ip:2001:db8:abcd:12:0:0:0:1}:edge')
  t.equal(await edgeKeyOf(128, '2001:0DB8:ABCD:0012:0000:0000:0000:0001'), '{ip:2001:db8:abcd:12:0:0:0:1}:edge', 'one key for two spellings')
})

t.test('FRL: default keyGenerator masks trusted IPv6 clients to /64', async (t) => {
  // Same.
  const { app, from } = await behindProxy()
  t.teardown(() => app.close())
  t.equal(await from('2001:0DB8:ABCD:0012:0000:0000:0000:0001'), 200)
  t.equal(await from('2001:db8:abcd:12::2'), 429, 'same /64')
  t.equal(await from('2001:db8:abcd:13::1'), 200, 'another /64')
})

t.test('FRL: default keyGenerator uses configured ipv6Subnet', async (t) => {
  // Same: `edge.ipv6Subnet`.
  const { app, from } = await behindProxy(48)
  t.teardown(() => app.close())
  t.equal(await from('2001:db8:abcd:12::1'), 200)
  t.equal(await from('2001:db8:abcd:13::1'), 429, 'same /48')
})

t.test('FRL: invalid ipv6Subnet values fall back to /64', async (t) => {
  // Differs by design: an invalid prefix fails startup, naming the option (FRL falls back to 64).
  for (const ipv6Subnet of [-1, 129]) {
    const bad = await failure(async () => { await Fastify().register(tollgate, { edge: { capacity: 1, refillPerSecond: 1, ipv6Subnet } }) })
    t.equal(bad.code, 'TOLLGATE_INVALID_OPTION', `ipv6Subnet ${ipv6Subnet}`)
    t.match(bad.message, `Expected \`edge.ipv6Subnet\` to be an integer`)
  }
})
