/**
 * The demo's acts, run in virtual time so their figures are exact, and the
 * `npm run demo` entry point itself (act 1 only, in real time).
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { bucketAct, layersAct, memoryStores, redisStores, replicaRun, steadyRate, total, virtualTime } from '../demo/acts.js'
import { requireRedis, startRedis } from './redis-server.js'

// Acts in real time and child processes: more than tap's 30 s on a busy machine.
t.setTimeout(120_000)

const sum = (values: number[]): number => values.reduce((a, b) => a + b, 0)

t.test('act 1: a bucket of 20 refilling 5/s admits B + R·t', async (t) => {
  const act = await bucketAct(virtualTime())
  // The last tick is at 3.95 s: 20 + 5 × 3.95 = 39.75 tokens, so 39 whole requests.
  t.equal(sum(act.admitted), 39)
  t.equal(sum(act.admitted) + sum(act.refused), 160, '40 requests a second for 4 s')
  t.equal(act.admitted[0], 10, 'the first 250 ms all pass (the bucket starts full)')
  t.equal(sum(act.admitted.slice(4, 8)), 5, 'then 5 a second')
})

t.test('act 2: three replicas on memory stores admit three times the quota', async (t) => {
  const time = virtualTime()
  const run = await replicaRun(time, memoryStores(time))
  t.same(run.replicas.map(steadyRate), [100, 100, 100], 'each replica counts alone')
  t.equal(steadyRate(total(run)), 300)
  t.equal(run.errors, 0)
})

t.test('acts 2 and 3: on one Redis the replicas share the quota, and survive an outage', async (t) => {
  if (!requireRedis(t)) return
  const server = await startRedis(t)
  const clients: Redis[] = []
  t.teardown(() => { for (const client of clients) client.disconnect() })
  const connect = (): Redis => {
    const client = new Redis({ port: server.port, host: '127.0.0.1', enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 50 })
    client.on('error', () => {})
    clients.push(client)
    return client
  }
  const time = virtualTime()
  // A busy machine must not turn a slow call into a failover: 1 s, not the demo's 50 ms.
  const stores = redisStores(time, connect, 1000)
  const shared = await replicaRun(time, stores)
  t.equal(steadyRate(total(shared)), 100, 'one quota for the three')
  t.ok(shared.replicas.every((replica) => steadyRate(replica) > 20), `each replica gets a part: ${shared.replicas.map(steadyRate).join(', ')}/s`)
  t.same([...new Set(shared.mode)], ['shared'])
  for (const client of clients.splice(0)) client.disconnect()

  const outage = await replicaRun(time, stores, {
    durationMs: 7000,
    events: [
      { atMs: 2000, run: async () => { await server.kill() } },
      {
        atMs: 4000,
        run: async () => {
          await server.start()
          // Redis is back when the replicas can reach it again (ioredis reconnects in real time).
          while (!clients.every((client) => client.status === 'ready')) await new Promise((resolve) => setTimeout(resolve, 20))
        }
      }
    ]
  })
  const totals = total(outage)
  t.equal(outage.errors, 0, 'no request failed')
  t.same(outage.mode.slice(0, 4), ['shared', 'shared', 'shared', 'shared'])
  t.same(outage.mode.slice(4, 8), ['local', 'local', 'local', 'local'], 'on local shares while Redis is away')
  t.same(totals.slice(5, 8), [120, 120, 120], 'quota × 1.2 headroom / 3 replicas, on each of the 3')
  t.equal(outage.mode.at(-1), 'shared', 'shared again after Redis is back')
  t.same(totals.slice(-2), [100, 100])
})

t.test('act 4: the edge stops the NAT office, the app layer the heavy user', async (t) => {
  const [office, vip, basic, exporter] = await layersAct(virtualTime())
  t.match(office, { sent: 300, admitted: 245, app: 0 }, 'edge: 100 + 50/s × 2.9 s for the whole office')
  t.equal(office!.edge, 55)
  t.match(vip, { sent: 120, admitted: 120, edge: 0, app: 0 }, 'a vip quota covers 40/s')
  t.match(basic, { sent: 120, edge: 0 }, 'a default user is under the edge')
  t.ok(basic!.app > 0 && basic!.admitted + basic!.app === 120, `and over their own quota: ${basic!.app} refused by the app layer`)
  t.match(exporter, { sent: 6, admitted: 4, app: 2 }, 'exports at cost 10: 20 tokens, then 10 a second')
})

const DEMO = fileURLToPath(new URL('../demo/index.js', import.meta.url))

/** Runs `npm run demo -- <args>` (with `env` over this process's); resolves with its exit code, stdout and stderr. */
async function runDemo (args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null, output: string, errors: string }> {
  const child = spawn(process.execPath, [DEMO, ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  let errors = ''
  child.stdout.on('data', (chunk: Buffer) => { output += String(chunk) })
  child.stderr.on('data', (chunk: Buffer) => { errors += String(chunk) })
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve))
  return { code, output, errors }
}

t.test('npm run demo: the entry point runs an act and prints its figures', async (t) => {
  const { code, output } = await runDemo(['1'])
  t.equal(code, 0)
  t.match(output, /Act 1\/4 · the token bucket/)
  t.match(output, /Act 1: admitted \d+ of \d+: B \+ R × t = 20 \+ 5 × 4 = 40\./)
  t.notMatch(output, /Act 2\/4/, 'only the act asked for')
})

t.test('npm run demo writes its SVG under build/, or where --svg says; never over the tracked demo/replicas.svg', async (t) => {
  const tracked = fileURLToPath(new URL('../../demo/replicas.svg', import.meta.url))
  const before = readFileSync(tracked, 'utf8')
  const { mtimeMs } = statSync(tracked)
  t.teardown(() => { if (readFileSync(tracked, 'utf8') !== before) writeFileSync(tracked, before) })
  const byDefault = fileURLToPath(new URL('../demo/replicas.svg', import.meta.url))
  rmSync(byDefault, { force: true })
  const dir = mkdtempSync(join(tmpdir(), 'tollgate-demo-'))
  t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
  const asked = join(dir, 'replicas.svg')

  // An empty PATH hides redis-server: act 2 then runs its memory half alone (4 s).
  const [plain, withSvg] = await Promise.all([runDemo(['2'], { PATH: '' }), runDemo(['2', '--svg', asked], { PATH: '' })])
  t.equal(plain.code, 0)
  t.equal(withSvg.code, 0)
  t.equal(statSync(tracked).mtimeMs, mtimeMs, 'demo/replicas.svg is not written')
  t.equal(readFileSync(tracked, 'utf8'), before, 'nor changed')
  t.ok(plain.output.includes(`Wrote ${byDefault}`), `by default: ${byDefault}`)
  t.match(readFileSync(byDefault, 'utf8'), /^<svg/)
  t.ok(withSvg.output.includes(`Wrote ${asked}`), '--svg <file>: that file')
  t.match(readFileSync(asked, 'utf8'), /^<svg/)

  const bare = await runDemo(['--svg'])
  t.equal(bare.code, 1, '--svg without a file fails')
  t.match(bare.errors, /Usage: npm run demo -- \[act …\] \[--svg <file>\]/)
})

t.test('npm run demo: --help prints the usage; an unknown act fails with it, running nothing', async (t) => {
  const [help, five, flag] = await Promise.all([runDemo(['--help']), runDemo(['5']), runDemo(['1', '--fast'])])
  t.equal(help.code, 0, '--help exits 0')
  t.match(help.output, /^Usage: npm run demo -- \[act …\] \[--svg <file>\]/)
  t.match(help.output, /1 the token bucket, 2 three replicas, 3 Redis goes away, 4 the two layers/)
  t.equal(five.code, 1, 'act 5 exits 1')
  t.match(five.errors, /^Unknown act "5"\.\nUsage: npm run demo/)
  t.notMatch(five.output, /Act \d\/4/, 'and runs no act')
  t.equal(flag.code, 1, 'an unknown flag exits 1')
  t.match(flag.errors, /^Unknown act "--fast"/)
  t.notMatch(flag.output, /Act \d\/4/)
})
