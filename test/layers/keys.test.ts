import t from 'tap'
import { createHash, createHmac } from 'node:crypto'
import { boundIdentity, bucketKey, keyDigest } from '../../lib/output/key-format.js'
import { clientAddress, plainAddress } from '../../lib/layers/keys.js'

t.test('clientAddress normalises client IPs', async (t) => {
  const cases: Array<[string | undefined, number, string]> = [
    ['203.0.113.9', 64, '203.0.113.9'],
    ['::ffff:203.0.113.9', 64, '203.0.113.9'],
    ['::ffff:cb00:7109', 64, '203.0.113.9'],
    ['2001:db8:aaaa:bbbb:1:2:3:4', 64, '2001:db8:aaaa:bbbb::/64'],
    ['2001:DB8:AAAA:BBBB::9', 64, '2001:db8:aaaa:bbbb::/64'],
    ['2001:db8::1', 64, '2001:db8:0:0::/64'],
    ['2001:db8:aaaa:bbbb::1', 56, '2001:db8:aaaa:bb00::/56'],
    ['2001:db8:aaaa:bbbb::1', 1, '0::/1'],
    ['fe80::1%eth0', 64, 'fe80:0:0:0::/64'],
    ['2001:db8::1:2:3:4', 128, '2001:db8:0:0:1:2:3:4'],
    ['2001:db8::1:2:3:4', 120, '2001:db8:0:0:1:2:3:0/120'],
    ['::1', 128, '0:0:0:0:0:0:0:1'],
    ['1:2:3:4:5:6:1.2.3.4', 128, '1:2:3:4:5:6:102:304'],
    ['203.0.113.9:40001', 64, '203.0.113.9'],
    ['[2001:db8:aaaa:bbbb::1]:443', 64, '2001:db8:aaaa:bbbb::/64'],
    ['[2001:db8:aaaa:bbbb::1]', 64, '2001:db8:aaaa:bbbb::/64'],
    ['[::ffff:203.0.113.9]:8080', 64, '203.0.113.9'],
    ['[fe80::1%eth0]:443', 64, 'fe80:0:0:0::/64'],
    ['2001:db8:aaaa:bbbb::443', 128, '2001:db8:aaaa:bbbb:0:0:0:443'],
    ['::1:443', 128, '0:0:0:0:0:0:1:443'],
    ['203.0.113.9:', 64, '203.0.113.9:'],
    ['203.0.113.9:123456', 64, '203.0.113.9:123456'],
    ['localhost:8080', 64, 'localhost:8080'],
    ['[not-an-ip]:443', 64, '[not-an-ip]:443'],
    ['[2001:db8::1]x', 64, '[2001:db8::1]x'],
    ['[2001:db8::1', 64, '[2001:db8::1'],
    ['not-an-ip', 64, 'not-an-ip'],
    ['', 64, 'unknown'],
    [undefined, 64, 'unknown']
  ]
  for (const [ip, bits, expected] of cases) t.equal(clientAddress(ip, bits), expected, `${String(ip)} /${bits}`)
})

t.test('clientAddress: an IPv4-mapped address with an unbracketed port is its IPv4 address', async (t) => {
  const cases: Array<[string, number, string]> = [
    ['::ffff:203.0.113.7:40001', 64, '203.0.113.7'],
    ['::ffff:203.0.113.7:40002', 128, '203.0.113.7'],
    ['::FFFF:203.0.113.7:443', 64, '203.0.113.7'],
    ['0:0:0:0:0:ffff:203.0.113.7:1', 64, '203.0.113.7'],
    // A dotted tail ends an IPv6 address, so a group after it can only be a port.
    ['64:ff9b::8.8.8.8:40001', 64, '8.8.8.8'],
    ['64:ff9b::127.0.0.1:40001', 128, '64:ff9b:0:0:0:0:7f00:1'],
    ['::1.2.3.4:80', 128, '0:0:0:0:0:0:102:304'],
    // Ambiguous or not an address: left as it is (a hex last group is an address's, not a port).
    ['2001:db8::1:4000', 128, '2001:db8:0:0:0:0:1:4000'],
    ['::ffff:cb00:7107:4000', 128, '0:0:0:0:ffff:cb00:7107:4000'],
    ['::ffff:cb00:7107:40001', 64, '::ffff:cb00:7107:40001'],
    ['2001:db8::1:40001', 64, '2001:db8::1:40001'],
    ['::ffff:203.0.113.7:', 64, '::ffff:203.0.113.7:'],
    ['::ffff:203.0.113.7:123456', 64, '::ffff:203.0.113.7:123456'],
    ['::ffff:203.0.113.7:80:80', 64, '::ffff:203.0.113.7:80:80'],
    ['::ffff:203.0.113:40001', 64, '::ffff:203.0.113:40001'],
    ['1.2.3.4:80:90', 64, '1.2.3.4:80:90']
  ]
  for (const [ip, bits, expected] of cases) t.equal(clientAddress(ip, bits), expected, `${ip} /${bits}`)
})

t.test('clientAddress: a NAT64 address (64:ff9b::/96) of a global IPv4 address is that address', async (t) => {
  const cases: Array<[string, number, string]> = [
    ['64:ff9b::8.8.8.8', 64, '8.8.8.8'],
    ['64:ff9b::808:808', 64, '8.8.8.8'],
    ['64:FF9B::5DB8:D822', 64, '93.184.216.34'],
    ['64:ff9b:0:0:0:0:808:809', 128, '8.8.8.9'],
    ['64:ff9b::1.1.1.1', 128, '1.1.1.1'],
    ['[64:ff9b::808:808]:443', 64, '8.8.8.8'],
    // Next to the non-global ranges, on either side: global.
    ['64:ff9b::1.0.0.0', 128, '1.0.0.0'],
    ['64:ff9b::9.255.255.255', 128, '9.255.255.255'],
    ['64:ff9b::11.0.0.0', 128, '11.0.0.0'],
    ['64:ff9b::100.63.255.255', 128, '100.63.255.255'],
    ['64:ff9b::100.128.0.0', 128, '100.128.0.0'],
    ['64:ff9b::126.255.255.255', 128, '126.255.255.255'],
    ['64:ff9b::128.0.0.0', 128, '128.0.0.0'],
    ['64:ff9b::169.253.255.255', 128, '169.253.255.255'],
    ['64:ff9b::169.255.0.0', 128, '169.255.0.0'],
    ['64:ff9b::172.15.255.255', 128, '172.15.255.255'],
    ['64:ff9b::172.32.0.0', 128, '172.32.0.0'],
    ['64:ff9b::191.255.255.255', 128, '191.255.255.255'],
    ['64:ff9b::192.0.1.0', 128, '192.0.1.0'],
    ['64:ff9b::192.0.3.0', 128, '192.0.3.0'],
    ['64:ff9b::192.88.99.1', 128, '192.88.99.1'],
    ['64:ff9b::192.167.255.255', 128, '192.167.255.255'],
    ['64:ff9b::192.169.0.0', 128, '192.169.0.0'],
    ['64:ff9b::198.17.255.255', 128, '198.17.255.255'],
    ['64:ff9b::198.20.0.0', 128, '198.20.0.0'],
    ['64:ff9b::198.51.99.255', 128, '198.51.99.255'],
    ['64:ff9b::198.51.101.0', 128, '198.51.101.0'],
    ['64:ff9b::203.0.112.255', 128, '203.0.112.255'],
    ['64:ff9b::203.0.114.0', 128, '203.0.114.0'],
    ['64:ff9b::223.255.255.255', 128, '223.255.255.255'],
    // Outside the well-known /96: an IPv6 address like any other.
    ['64:ff9b:1::808:808', 128, '64:ff9b:1:0:0:0:808:808'],
    ['64:ff9b::1:808:808', 128, '64:ff9b:0:0:0:1:808:808'],
    ['64:ff9a::808:808', 64, '64:ff9a:0:0::/64']
  ]
  for (const [ip, bits, expected] of cases) t.equal(clientAddress(ip, bits), expected, `${ip} /${bits}`)
  t.not(clientAddress('64:ff9b::808:808', 64), clientAddress('64:ff9b::808:809', 64), 'two NAT64 clients, two buckets (not one /64)')
})

t.test('clientAddress: a NAT64 address of a non-global IPv4 address (RFC 6052 §3.1) stays IPv6, grouped by ipv6Subnet', async (t) => {
  const nonGlobal = [
    '0.0.0.0', '0.255.255.255', // this network
    '10.0.0.5', '10.255.255.255', // private
    '100.64.0.0', '100.127.255.255', // shared
    '127.0.0.1', '127.255.255.255', // loopback
    '169.254.0.0', '169.254.169.254', // link-local
    '172.16.0.1', '172.31.255.255', // private
    '192.0.0.0', '192.0.0.255', // IETF protocol assignments
    '192.0.2.0', '192.0.2.255', // TEST-NET-1
    '192.168.0.0', '192.168.255.255', // private
    '198.18.0.0', '198.19.255.255', // benchmarking
    '198.51.100.0', '198.51.100.255', // TEST-NET-2
    '203.0.113.0', '203.0.113.255', // TEST-NET-3
    '224.0.0.1', '239.255.255.255', // multicast
    '240.0.0.0', '255.255.255.255' // reserved, broadcast
  ]
  for (const ipv4 of nonGlobal) {
    t.equal(clientAddress(`64:ff9b::${ipv4}`, 64), '64:ff9b:0:0::/64', `64:ff9b::${ipv4} /64`)
    t.equal(clientAddress(`64:ff9b::${ipv4}`, 96), '64:ff9b:0:0:0:0::/96', `64:ff9b::${ipv4} /96`)
  }
  const cases: Array<[string, number, string]> = [
    ['64:ff9b::7f00:1', 128, '64:ff9b:0:0:0:0:7f00:1'],
    ['64:ff9b::a00:5', 128, '64:ff9b:0:0:0:0:a00:5'],
    ['64:FF9B::C0A8:101', 128, '64:ff9b:0:0:0:0:c0a8:101'],
    ['[64:ff9b::cb00:7107]:443', 128, '64:ff9b:0:0:0:0:cb00:7107'],
    ['64:ff9b::', 128, '64:ff9b:0:0:0:0:0:0']
  ]
  for (const [ip, bits, expected] of cases) t.equal(clientAddress(ip, bits), expected, `${ip} /${bits}`)
})

t.test('identities are bounded and sanitised', async (t) => {
  t.equal(boundIdentity('alice@example.com'), 'alice@example.com', 'plain ids stay readable')
  t.equal(boundIdentity('2001:db8::/64'), '2001:db8::/64')
  for (const hostile of ['a}b', '{user:bob}', 'line\nbreak', 'x'.repeat(101), 'space here', '']) {
    const bounded = boundIdentity(hostile)
    t.match(bounded, /^~[\w-]{43}$/, JSON.stringify(hostile.slice(0, 20)))
    t.notMatch(bounded, /[{}\n]/)
  }
  t.not(boundIdentity('a}b'), boundIdentity('a{b'), 'distinct inputs, distinct digests')
  t.equal(boundIdentity('x'.repeat(100)), 'x'.repeat(100), 'up to 100 characters are kept')
})

t.test('bucketKey puts the identity in one hash tag', async (t) => {
  t.equal(bucketKey('user', '42', 'app'), '{user:42}:app')
  t.equal(bucketKey('user', '42', 'route:POST /export'), '{user:42}:route:POST /export')
  t.match(bucketKey('user', '}{evil', 'app'), /^\{user:~[\w-]+\}:app$/)
})

t.test('keyDigest: HMAC-SHA256 with a secret, SHA-256 without', async (t) => {
  const keyed = keyDigest('a-secret-of-at-least-16-characters')
  const plain = keyDigest(undefined)
  const hmac = createHmac('sha256', 'a-secret-of-at-least-16-characters').update('sk_live_1').digest('base64url')
  t.equal(keyed('sk_live_1'), hmac)
  t.equal(plain('sk_live_1'), createHash('sha256').update('sk_live_1').digest('base64url'))
  t.equal(keyed('k'.repeat(300)), createHmac('sha256', 'a-secret-of-at-least-16-characters').update('k'.repeat(300)).digest('base64url'), 'a long value')
})

t.test('an ill-formed identity (a lone surrogate) gets a key of its own, never a well-formed one\'s', async (t) => {
  // UTF-8 takes a lone surrogate as U+FFFD: hashing UTF-8 bytes would put these in one bucket.
  const ill = 'alice\uD800'
  const replaced = 'alice\uFFFD'
  t.match(boundIdentity(ill), /^~u16\.[\w-]{43}$/)
  t.not(boundIdentity(ill), boundIdentity(replaced))
  t.not(boundIdentity(ill), boundIdentity('alice\uDC00'), 'two lone surrogates, two keys')
  t.equal(boundIdentity(replaced), '~' + createHash('sha256').update(replaced).digest('base64url'), 'a well-formed id keeps its key')
  t.equal(boundIdentity('a\uD83D\uDE00'), '~' + createHash('sha256').update('a\uD83D\uDE00').digest('base64url'), 'a surrogate pair is well-formed')
  for (const digest of [keyDigest(undefined), keyDigest('a-secret-of-at-least-16-characters')]) {
    t.match(digest(ill), /^u16\.[\w-]{43}$/)
    t.not(digest(ill), digest(replaced))
    t.match(digest(replaced), /^[\w-]{43}$/)
  }
})

t.test('user ids and edge.key values with a lone surrogate do not share a bucket with their U+FFFD twin', async (t) => {
  const { default: Fastify } = await import('fastify')
  const { default: tollgate, memoryStore } = await import('../../lib/index.js')
  const ids: Record<string, string> = { attacker: 'alice\uD800', victim: 'alice\uFFFD' }
  for (const digestIds of [false, true]) {
    const app = Fastify()
    await app.register(tollgate, {
      store: memoryStore(),
      edge: { capacity: 1, refillPerSecond: 0, key: (request) => ids[String(request.headers['x-who'])] },
      app: { digestIds, tiers: { default: { capacity: 1, refillPerSecond: 0 } }, identify: (request) => ({ id: ids[String(request.headers['x-who'])] as string }) }
    })
    app.get('/', async () => 'ok')
    const codes = []
    for (const who of ['attacker', 'victim']) codes.push((await app.inject({ url: '/', headers: { 'x-who': who } })).statusCode)
    t.same(codes, [200, 200], `digestIds ${digestIds}: the victim keeps its own tokens`)
    await app.close()
  }
})

t.test('plainAddress: an address as BlockList checks it, or undefined', async (t) => {
  const cases: Array<[string | undefined, unknown]> = [
    ['203.0.113.7', { address: '203.0.113.7', family: 'ipv4' }],
    ['203.0.113.7:40001', { address: '203.0.113.7', family: 'ipv4' }],
    ['[2001:db8::1]:443', { address: '2001:db8::1', family: 'ipv6' }],
    ['fe80::1%eth0', { address: 'fe80::1', family: 'ipv6' }],
    ['::ffff:10.0.0.1', { address: '::ffff:10.0.0.1', family: 'ipv6' }],
    ['::ffff:10.0.0.1:40001', { address: '::ffff:10.0.0.1', family: 'ipv6' }],
    ['64:ff9b::8.8.8.8', { address: '64:ff9b::8.8.8.8', family: 'ipv6', ipv4: '8.8.8.8' }],
    ['64:ff9b::808:808', { address: '64:ff9b::808:808', family: 'ipv6', ipv4: '8.8.8.8' }],
    ['64:ff9b::8.8.8.8:40001', { address: '64:ff9b::8.8.8.8', family: 'ipv6', ipv4: '8.8.8.8' }],
    ['64:ff9b:1::808:808', { address: '64:ff9b:1::808:808', family: 'ipv6' }],
    // A non-global IPv4 address behind the well-known prefix: IPv6 only, no IPv4 rule applies.
    ['64:ff9b::7f00:1', { address: '64:ff9b::7f00:1', family: 'ipv6' }],
    ['64:ff9b::10.0.0.5:40001', { address: '64:ff9b::10.0.0.5', family: 'ipv6' }],
    ['[64:ff9b::cb00:7107]:443', { address: '64:ff9b::cb00:7107', family: 'ipv6' }],
    ['2001:db8::1:40001', undefined],
    ['not-an-ip', undefined],
    ['', undefined],
    [undefined, undefined]
  ]
  for (const [ip, expected] of cases) t.same(plainAddress(ip), expected, String(ip))
})

t.test('app.digestIds: user ids go into store keys as digests, in the layer and the manual API alike', async (t) => {
  const { createHmac, createHash } = await import('node:crypto')
  const { default: Fastify } = await import('fastify')
  const { default: tollgate } = await import('../../lib/index.js')
  const secret = 'digest-test-secret-0123456789'
  for (const [edge, digest] of [
    [undefined, createHash('sha256').update('alice@example.com').digest('base64url')],
    [{ global: false as const, keySecret: secret }, createHmac('sha256', secret).update('alice@example.com').digest('base64url')]
  ] as const) {
    const keys: string[] = []
    const app = Fastify()
    await app.register(tollgate, {
      ...(edge === undefined ? {} : { edge }),
      app: { digestIds: true, tiers: { default: { capacity: 1, refillPerSecond: 0 } }, identify: () => ({ id: 'alice@example.com' }) },
      onLimit: (_request, decision) => { keys.push(...decision.buckets.map((bucket) => bucket.key)) }
    })
    app.post('/export', { config: { rateLimit: { quota: { default: { capacity: 5, refillPerSecond: 0 } } } } }, async () => 'ok')
    await app.inject({ method: 'POST', url: '/export' })
    await app.inject({ method: 'POST', url: '/export' })
    t.same(keys, [`{user:${digest}}:app`, `{user:${digest}}:route:POST /export`], 'never the id in clear')
    t.equal((await app.tollgate.peek({ layer: 'app', user: 'alice@example.com' })).buckets[0]?.key, `{user:${digest}}:app`, 'the manual API names the same bucket')
    await app.close()
  }
  const plain = Fastify()
  await plain.register(tollgate, { app: { tiers: { default: { capacity: 1, refillPerSecond: 0 } } } })
  t.equal((await plain.tollgate.peek({ layer: 'app', user: 'alice' })).buckets[0]?.key, '{user:alice}:app', 'off by default: ids as they are')
  await plain.close()
})
