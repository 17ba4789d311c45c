/**
 * Misconfiguration warnings: each logged once, with its code, and each can be
 * switched off (lib/warnings.ts).
 */
import t from 'tap'
import Fastify, { type FastifyServerOptions } from 'fastify'
import { Redis } from 'ioredis'
import tollgate, { memoryStore, redisStore, WARNINGS, type TollgateOptions, type WarningCode } from '../../lib/index.js'
import { ONLY_ANONYMOUS_AFTER } from '../../lib/output/warnings.js'
import { logSink, unhandledRejections } from '../helpers.js'

const EDGE = { capacity: 1000, refillPerSecond: 100 }

/** An app with the plugin, a route, and a log; `codes()` lists the warning codes logged. */
async function appWith (options: TollgateOptions, server: FastifyServerOptions = {}) {
  const { lines, logger } = logSink()
  const app = Fastify({ ...server, logger })
  await app.register(tollgate, options)
  app.get('/', async () => 'ok')
  await app.ready()
  const codes = (): string[] => lines.filter((line) => line.level === 40 && typeof line.code === 'string').map((line) => line.code as string)
  return { app, codes, lines }
}

t.test('each warning has a message that names the problem', async (t) => {
  t.same(Object.keys(WARNINGS).sort(), ['TOLLGATE_EDGE_MODE_LOCAL', 'TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY', 'TOLLGATE_IDENTITY_QUOTA_IGNORED', 'TOLLGATE_NO_ROUTES', 'TOLLGATE_ONLY_ANONYMOUS', 'TOLLGATE_ROUTE_BEFORE_PLUGIN', 'TOLLGATE_SHARED_STORE', 'TOLLGATE_TIER_ABOVE_EDGE', 'TOLLGATE_TRUST_PROXY_TRUE'])
  for (const message of Object.values(WARNINGS)) t.ok(message.length > 40)
})

t.test('TOLLGATE_TRUST_PROXY_TRUE: trustProxy: true lets anyone pick their IP', async (t) => {
  const { app, codes, lines } = await appWith({ edge: EDGE }, { trustProxy: true })
  t.same(codes(), ['TOLLGATE_TRUST_PROXY_TRUE'])
  const line = lines.find((l) => l.code === 'TOLLGATE_TRUST_PROXY_TRUE')
  t.match(line?.msg, /X-Forwarded-For.*switch off with warnings: \{ TOLLGATE_TRUST_PROXY_TRUE: false \}/)
  await app.close()

  await t.test('also from an encapsulated registration', async (t) => {
    const { lines, logger } = logSink()
    const app = Fastify({ trustProxy: true, logger })
    await app.register(async (child) => { await child.register(tollgate, { edge: EDGE }) })
    await app.ready()
    t.ok(lines.some((l) => l.code === 'TOLLGATE_TRUST_PROXY_TRUE'))
    await app.close()
  })
  for (const trustProxy of ['10.0.0.0/8', false]) {
    const quiet = await appWith({ edge: EDGE }, { trustProxy })
    await quiet.app.inject('/')
    t.same(quiet.codes(), [], `trustProxy: ${JSON.stringify(trustProxy)} is fine`)
    await quiet.app.close()
  }
  const off = await appWith({ edge: EDGE, warnings: { TOLLGATE_TRUST_PROXY_TRUE: false } }, { trustProxy: true })
  t.same(off.codes(), [], 'switched off')
  await off.app.close()
})

t.test('TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY: once, at the first X-Forwarded-For', async (t) => {
  const forwarded = { url: '/', headers: { 'x-forwarded-for': '203.0.113.9' } }
  const { app, codes, lines } = await appWith({ edge: EDGE })
  await app.inject('/')
  t.same(codes(), [], 'nothing without the header')
  await app.inject(forwarded)
  await app.inject(forwarded)
  t.same(codes(), ['TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY'], 'logged once')
  t.match(lines.find((l) => l.code !== undefined), { ip: '127.0.0.1', forwardedFor: '203.0.113.9' })
  await app.close()

  const appOnly = await appWith({ app: { tiers: { default: EDGE } } })
  await appOnly.app.inject(forwarded)
  t.same(appOnly.codes(), ['TOLLGATE_FORWARDED_WITHOUT_TRUST_PROXY'], 'seen by the app layer when there is no edge')
  await appOnly.app.close()

  const trusted = await appWith({ edge: EDGE }, { trustProxy: '127.0.0.1' })
  await trusted.app.inject(forwarded)
  t.same(trusted.codes(), [], 'with trustProxy the header is used, not a problem')
  await trusted.app.close()

  const off = await appWith({ edge: EDGE, warnings: false })
  await off.app.inject(forwarded)
  t.same(off.codes(), [], 'warnings: false switches every warning off')
  await off.app.close()
})

t.test('TOLLGATE_ONLY_ANONYMOUS: the app layer never saw a user', async (t) => {
  const app = { tiers: { default: { capacity: 1e6, refillPerSecond: 1e6 } } }
  const anonymous = await appWith({ app })
  for (let i = 1; i < ONLY_ANONYMOUS_AFTER; i++) await anonymous.app.inject('/')
  t.same(anonymous.codes(), [], `not before ${ONLY_ANONYMOUS_AFTER} requests`)
  await anonymous.app.inject('/')
  await anonymous.app.inject('/')
  t.same(anonymous.codes(), ['TOLLGATE_ONLY_ANONYMOUS'], 'logged once')
  await anonymous.app.close()

  const identified = await appWith({ app: { ...app, identify: (request) => request.headers['x-user'] === undefined ? undefined : { id: String(request.headers['x-user']) } } })
  await identified.app.inject({ url: '/', headers: { 'x-user': 'alice' } })
  for (let i = 0; i < ONLY_ANONYMOUS_AFTER; i++) await identified.app.inject('/')
  t.same(identified.codes(), [], 'one identified request is enough')
  await identified.app.close()

  const off = await appWith({ app, warnings: { TOLLGATE_ONLY_ANONYMOUS: false } })
  for (let i = 0; i < ONLY_ANONYMOUS_AFTER; i++) await off.app.inject('/')
  t.same(off.codes(), [], 'switched off')
  await off.app.close()
})

t.test('TOLLGATE_EDGE_MODE_LOCAL: an edge mode for replicas on the memory store', async (t) => {
  const codesOf = async (options: TollgateOptions): Promise<Array<{ code: string, mode?: unknown }>> => {
    const { lines, logger } = logSink()
    const app = Fastify({ logger })
    await app.register(tollgate, options)
    await app.ready()
    await app.close()
    return lines.filter((line) => line.code !== undefined).map((line) => ({ code: line.code as string, mode: line.mode }))
  }
  t.same(await codesOf({ edge: { ...EDGE, mode: 'settle' } }), [{ code: 'TOLLGATE_EDGE_MODE_LOCAL', mode: 'settle' }], 'the default store')
  t.same(await codesOf({ store: memoryStore({ replicas: 3 }), edge: { ...EDGE, mode: 'replica-share' } }), [{ code: 'TOLLGATE_EDGE_MODE_LOCAL', mode: 'replica-share' }])
  t.same(await codesOf({ edge: { ...EDGE, mode: 'exact' } }), [], "'exact': nothing")
  const client = new Redis({ lazyConnect: true })
  t.same(await codesOf({ store: redisStore({ client, heartbeatIntervalMs: 0, connectWaitMs: 0 }), edge: { ...EDGE, mode: 'replica-share' } }), [], 'a shared store: nothing')
  client.disconnect()
  t.same(await codesOf({ edge: { ...EDGE, mode: 'settle' }, warnings: { TOLLGATE_EDGE_MODE_LOCAL: false } }), [], 'switched off')
})

t.test('TOLLGATE_SHARED_STORE: two registrations on one store or one Redis prefix', async (t) => {
  const twoScopes = async (first: TollgateOptions, second: TollgateOptions): Promise<string[]> => {
    const { lines, logger } = logSink()
    const app = Fastify({ logger })
    await app.register(async (scope) => { await scope.register(tollgate, first); scope.get('/a', async () => 'a') })
    await app.register(async (scope) => { await scope.register(tollgate, second); scope.get('/b', async () => 'b') })
    await app.ready()
    await app.close()
    return lines.filter((line) => line.code !== undefined).map((line) => line.code as string)
  }
  const shared = memoryStore()
  t.same(await twoScopes({ store: shared, edge: EDGE }, { store: shared, edge: EDGE }), ['TOLLGATE_SHARED_STORE'])
  t.same(await twoScopes({ store: memoryStore(), edge: EDGE }, { store: memoryStore(), edge: EDGE }), [], 'a store each')
  t.same(await twoScopes({ store: shared, edge: EDGE }, { name: 'other', store: shared, edge: EDGE }), [], 'registrations of two names write apart')

  // A client that never connects: the stores only declare their scripts on it.
  const client = new Redis({ lazyConnect: true })
  const onRedis = (prefix?: string): TollgateOptions => ({ store: redisStore({ client, heartbeatIntervalMs: 0, prefix }), edge: EDGE })
  t.same(await twoScopes(onRedis(), onRedis()), ['TOLLGATE_SHARED_STORE'], 'one client, one prefix')
  t.same(await twoScopes(onRedis('a:'), onRedis('b:')), [], 'one client, two prefixes')
  t.same(await twoScopes(onRedis(), { ...onRedis(), warnings: { TOLLGATE_SHARED_STORE: false } }), [], 'switched off')

  const again = await appWith({ store: shared, edge: EDGE })
  t.same(again.codes(), [], 'a closed app releases its store')
  await again.app.close()
})

t.test('invalid warnings options fail at startup with a coded error', async (t) => {
  const cases: Array<[unknown, RegExp]> = [
    ['loud', /Expected `warnings` to be an object/],
    [{ TOLLGATE_NOPE: false }, /Unknown option `warnings\.TOLLGATE_NOPE`/],
    [{ TOLLGATE_SHARED_STORE: 'no' }, /Expected `warnings\.TOLLGATE_SHARED_STORE` to be a boolean, got `"no"`/]
  ]
  for (const [warnings, message] of cases) {
    const app = Fastify()
    await t.rejects(async () => { await app.register(tollgate, { edge: EDGE, warnings } as unknown as TollgateOptions) }, { code: 'TOLLGATE_INVALID_OPTION', message }, JSON.stringify(warnings))
    await app.close()
  }
  const on = await appWith({ edge: EDGE, warnings: { TOLLGATE_SHARED_STORE: true } satisfies Partial<Record<WarningCode, boolean>> }, { trustProxy: true })
  t.same(on.codes(), ['TOLLGATE_TRUST_PROXY_TRUE'], '`true` leaves a warning on; the others stay on by default')
  await on.app.close()
})

t.test('an async onLimit that rejects is logged, never an unhandled rejection', async (t) => {
  const escaped = unhandledRejections(t)
  const onLimit = async (): Promise<void> => { throw new Error('metrics down') }
  // eslint-disable-next-line @typescript-eslint/no-misused-promises -- an async onLimit is what is tested
  const { app, lines } = await appWith({ edge: { capacity: 1, refillPerSecond: 0 }, onLimit })
  t.same([(await app.inject('/')).statusCode, (await app.inject('/')).statusCode], [200, 429])
  await new Promise((resolve) => setImmediate(resolve))
  t.same(escaped, [], 'no unhandled rejection')
  t.equal(lines.filter((line) => line.msg === 'fastify-tollgate: onLimit rejected').length, 1)
  await app.close()
})
