import t from 'tap'
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { memoryStore } from '../lib/index.js'
import type { FastifyInstance } from 'fastify'
import { buildServer } from '../examples/server.js'
import { buildRedisServer } from '../examples/redis.js'
import { requireRedis, startRedis } from './redis-server.js'
import { count, manualClock, statuses } from './helpers.js'

t.test('the demo API limits as its README says', async (t) => {
  const clock = manualClock()
  const app = await buildServer({ store: memoryStore({ clock: clock.now }) })
  const token = async (query: string) => `Bearer ${(await app.inject(`/token?${query}`)).json().token as string}`
  const alice = await token('user=alice')
  const victor = await token('user=victor&tier=vip')
  const exportAs = (authorization: string) => statuses(app, 3, { method: 'POST', url: '/export', headers: { authorization } })
  t.same(await exportAs(alice), [200, 200, 429], 'default: 20 tokens, cost 10')
  t.same(await exportAs(victor), [200, 200, 200], 'vip: a larger quota')
  const home = await app.inject({ url: '/', headers: { authorization: victor } })
  t.match(home.json(), { hello: { sub: 'victor', tier: 'vip' } })
  t.match(home.headers['ratelimit'], /^"edge";r=\d+;t=\d+, "app";r=169;t=1$/)
  t.equal(count(await statuses(app, 12, { url: '/', remoteAddress: '198.51.100.3' }), 200), 10, 'anonymous: 10 per IP')
  const health = await app.inject('/health')
  t.equal(health.statusCode, 200)
  t.equal(health.headers['ratelimit'], undefined)
  await app.close()
})

t.test('npm start: the compiled demo starts, prints curl lines and answers', async (t) => {
  const server = fileURLToPath(new URL('../examples/server.js', import.meta.url))
  const child = spawn(process.execPath, [server], { env: { ...process.env, PORT: '0' }, stdio: ['ignore', 'pipe', 'inherit'] })
  t.teardown(() => { child.kill() })
  const url = await new Promise<string>((resolve, reject) => {
    let output = ''
    child.stdout.on('data', (chunk: Buffer) => {
      output += String(chunk)
      const match = /listening on (http:\/\/\S+)/.exec(output)
      if (match !== null && output.includes('Press Ctrl+C')) resolve(match[1] as string)
    })
    child.once('exit', (code) => { reject(new Error(`demo exited with ${String(code)}: ${output}`)) })
  })
  const response = await fetch(`${url}/`)
  t.equal(response.status, 200)
  t.equal(response.headers.get('ratelimit'), '"edge";r=99;t=1, "app";r=9;t=1')
  const exited = new Promise((resolve) => child.once('exit', resolve))
  child.kill('SIGTERM')
  t.equal(await exited, 0, 'stops cleanly on SIGTERM')
})

t.test('the Redis demo shares one quota between two replicas', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const url = `redis://127.0.0.1:${server.port}`
  const replicas = [await buildRedisServer(url), await buildRedisServer(url)]
  t.teardown(async () => { for (const app of replicas) await app.close() })
  const [first, second] = replicas as [FastifyInstance, FastifyInstance]
  const authorization = `Bearer ${(await first.inject('/token?user=alice')).json().token as string}`
  const exportOn = async (app: FastifyInstance) => (await app.inject({ method: 'POST', url: '/export', headers: { authorization } })).statusCode
  t.same([await exportOn(first), await exportOn(second), await exportOn(first)], [200, 200, 429], '20 tokens shared: two exports in all')
  const inspector = server.client(t)
  t.ok((await inspector.keys('tollgate:{user:alice}:*')).length === 2, 'the user and route buckets live in Redis')
})
