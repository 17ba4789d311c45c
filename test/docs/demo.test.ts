/**
 * The demo's acts, run in virtual time so their figures are exact, and the
 * `npm run demo` entry point itself (acts 1, 2 and 5, in real time).
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { channel } from 'node:diagnostics_channel'
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Redis } from 'ioredis'
import { DECISION_CHANNEL } from 'fastify-tollgate'
import { bucketAct, decisionsAct, layersAct, memoryStores, perSecond, redisStores, replicaRun, steadyRate, total, virtualTime } from '../../demo/acts.js'
import { decisionsSvg } from '../../demo/chart.js'
import { requireRedis, startRedis } from '../redis-server.js'
import { untracedEnv } from '../child-env.js'

// Acts in real time and child processes: more than tap's 30 s on a busy machine.
t.setTimeout(120_000)
// Two tests at a time: the child processes' group (first) beside the acts in virtual time, one after another.
t.jobs = 2

const sum = (values: number[]): number => values.reduce((a, b) => a + b, 0)

const DEMO = fileURLToPath(new URL('../../demo/index.js', import.meta.url))

/** Runs `npm run demo -- <args>` (with `env` over this process's); resolves with its exit code, stdout and stderr. */
async function runDemo (args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number | null, output: string, errors: string }> {
  const child = spawn(process.execPath, [DEMO, ...args], { env: untracedEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  let errors = ''
  child.stdout.on('data', (chunk: Buffer) => { output += String(chunk) })
  child.stderr.on('data', (chunk: Buffer) => { errors += String(chunk) })
  const code = await new Promise<number | null>((resolve) => child.once('close', resolve)) // 'close', not 'exit': after its output is read
  return { code, output, errors }
}

// `npm run demo` in child processes, its acts in real time (acts 1, 2 and 5: 4 to 7 s each):
// the three tests side by side, and beside the acts below, which run in this process in virtual time.
t.test('npm run demo, in child processes', { jobs: 3 }, async (t) => {
  void t.test('npm run demo: the entry point runs an act and prints its figures', async (t) => {
    const { code, output } = await runDemo(['1'])
    t.equal(code, 0)
    t.match(output, /Act 1\/5 · the token bucket/)
    t.match(output, /Act 1: admitted \d+ of \d+: B \+ R × t = 20 \+ 5 × 4 = 40\./)
    t.notMatch(output, /Act 2\/5/, 'only the act asked for')
  })

  void t.test('npm run demo writes its SVGs under build/, or where --svg and --decisions-svg say; never over the tracked ones', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'tollgate-demo-'))
    t.teardown(() => { rmSync(dir, { recursive: true, force: true }) })
    // Act 2, with an empty PATH to hide redis-server: its memory half alone (4 s); act 5 (7 s).
    const svgs = [{ act: '2', flag: '--svg', name: 'replicas.svg' }, { act: '5', flag: '--decisions-svg', name: 'decisions.svg' }].map((svg) => {
      const tracked = fileURLToPath(new URL(`../../../demo/${svg.name}`, import.meta.url))
      const before = readFileSync(tracked, 'utf8')
      t.teardown(() => { if (readFileSync(tracked, 'utf8') !== before) writeFileSync(tracked, before) })
      const byDefault = fileURLToPath(new URL(`../../demo/${svg.name}`, import.meta.url))
      rmSync(byDefault, { force: true })
      return { ...svg, tracked, before, mtimeMs: statSync(tracked).mtimeMs, byDefault, asked: join(dir, svg.name) }
    })
    const runs = await Promise.all(svgs.flatMap((svg) => [runDemo([svg.act], { PATH: '' }), runDemo([svg.act, svg.flag, svg.asked], { PATH: '' })]))
    svgs.forEach((svg, i) => {
      const [plain, withFlag] = [runs[2 * i]!, runs[2 * i + 1]!]
      t.equal(plain.code, 0, `act ${svg.act} exits 0`)
      t.equal(withFlag.code, 0, `and with ${svg.flag}`)
      t.equal(statSync(svg.tracked).mtimeMs, svg.mtimeMs, `demo/${svg.name} is not written`)
      t.equal(readFileSync(svg.tracked, 'utf8'), svg.before, 'nor changed')
      t.ok(plain.output.includes(`Wrote ${svg.byDefault}`), `by default: ${svg.byDefault}`)
      t.match(readFileSync(svg.byDefault, 'utf8'), /^<svg/)
      t.ok(withFlag.output.includes(`Wrote ${svg.asked}`), `${svg.flag} <file>: that file`)
      t.match(readFileSync(svg.asked, 'utf8'), /^<svg/)
    })

    const bare = await Promise.all([runDemo(['--svg']), runDemo(['--decisions-svg']), runDemo(['--svg', '--decisions-svg', join(dir, 'x.svg')])])
    for (const [i, run] of bare.entries()) {
      t.equal(run.code, 1, `a flag without a file fails (${i})`)
      t.match(run.errors, /^Usage: npm run demo -- \[act …\] \[--svg <file>\] \[--decisions-svg <file>\]/)
    }
  })

  void t.test('npm run demo: --help prints the usage; an unknown act fails with it, running nothing', async (t) => {
    const [help, six, flag] = await Promise.all([runDemo(['--help']), runDemo(['6']), runDemo(['1', '--fast'])])
    t.equal(help.code, 0, '--help exits 0')
    t.match(help.output, /^Usage: npm run demo -- \[act …\] \[--svg <file>\] \[--decisions-svg <file>\]/)
    t.match(help.output, /1 the token bucket, 2 three replicas, 3 Redis goes away, 4 the two layers, 5 watching it/)
    t.match(help.output, /--decisions-svg <file>: where act 5 writes its SVG \(default: build\/demo\/decisions\.svg\)/)
    t.equal(six.code, 1, 'act 6 exits 1')
    t.match(six.errors, /^Unknown act "6"\.\nUsage: npm run demo/)
    t.notMatch(six.output, /Act \d\/5/, 'and runs no act')
    t.equal(flag.code, 1, 'an unknown flag exits 1')
    t.match(flag.errors, /^Unknown act "--fast"/)
    t.notMatch(flag.output, /Act \d\/5/)
  })
})

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

t.test('act 5: decisions counted on DECISION_CHANNEL, by outcome, while a client floods and backs off', async (t) => {
  const decisions = channel(DECISION_CHANNEL)
  let watched = true
  const act = await decisionsAct(virtualTime(), () => { watched &&= decisions.hasSubscribers })
  t.ok(watched, 'subscribed for the whole act')
  t.notOk(decisions.hasSubscribers, 'and unsubscribed at its end')
  const { allowed, 'near-limit': near, refused, 'would-refuse': wouldRefuse, unavailable } = act.outcomes
  t.equal(sum(act.sent), 215, '50/s for 4 s, then 5/s for 3 s')
  t.same([sum(allowed), sum(near), sum(refused), sum(wouldRefuse), sum(unavailable)], [30, 44, 141, 0, 0], 'totals by outcome')
  t.equal(sum(allowed) + sum(near) + sum(refused), sum(act.sent), 'one decision per request sent (the edge alone decides)')
  t.same(act.sent.map((_, i) => allowed[i]! + near[i]! + refused[i]!), act.sent, 'in every bin')
  t.equal(act.tooMany, sum(refused), 'the channel\'s refusals are the 429s')
  t.equal(allowed[0], 10, 'the first 200 ms all pass with room (the bucket starts full)')
  t.equal(perSecond(allowed, act.binMs, 0, 1000) + perSecond(near, act.binMs, 0, 1000), 29, 'the first second: B + R × 0.98 s = 29.8, so 29 pass')
  for (const from of [1000, 2000, 3000]) {
    t.equal(perSecond(refused, act.binMs, from, from + 1000), 40, `${from / 1000} to ${from / 1000 + 1} s: 40 refused = 50 offered − R`)
    t.equal(perSecond(near, act.binMs, from, from + 1000), 10, 'and R = 10 pass, each leaving the bucket near empty')
    t.equal(perSecond(allowed, act.binMs, from, from + 1000), 0, 'and none with room')
  }
  const after = act.floodMs / act.binMs
  t.same(refused.slice(after), new Array<number>(15).fill(0), 'after the back-off nothing is refused')
  // R = 10/s refills 2 tokens per request at 5/s: the bucket holds 1, 2, 3, 4 (≤ 20% of 20), then more.
  t.same(near.slice(after), [1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 'near the limit for four requests, then not')
  t.equal(sum(allowed.slice(after)), 11, 'the other 11 pass with room')
  t.ok(act.storeMs > 0, 'each decision says how long the store took')

  const svg = decisionsSvg(act)
  const elements = xmlElements(svg)
  t.equal(elements[0], 'svg', 'an SVG')
  t.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/)
  t.equal(elements.filter((name) => name === 'polygon').length, 3, 'an area per outcome that occurred')
  for (const legend of ['allowed (30)', 'near-limit (44)', 'refused (141)']) t.ok(svg.includes(`>${legend}</text>`), `the legend: ${legend}`)
  t.notOk(svg.includes('would-refuse'), 'no outcome that did not occur')
  t.throws(() => xmlElements('<svg><g></svg>'), /closes <g>/, 'the checker fails a tag closed out of order')
  t.throws(() => xmlElements('<svg><text>a & b</text></svg>'), /bare &/, 'and unescaped text')
})

/**
 * The element names of `xml` in document order; throws unless it is well formed: one root,
 * every tag closed in order, attributes double-quoted, no bare `&` or `<` in text.
 */
function xmlElements (xml: string): string[] {
  const names: string[] = []
  const open: string[] = []
  const token = /<(\/?)([A-Za-z][\w-]*)((?:\s+[\w:-]+="[^"<]*")*)\s*(\/?)>|([^<]+)/y
  const bareAmpersand = /&(?!(?:lt|gt|amp|quot|apos|#\d+);)/
  for (let at = 0; at < xml.length; at = token.lastIndex) {
    token.lastIndex = at
    const match = token.exec(xml)
    if (match === null) throw new Error(`not XML at ${at}: ${xml.slice(at, at + 40)}`)
    const [, closing, name, attributes, selfClosing, text] = match
    if (text !== undefined) {
      if (open.length === 0 && text.trim() !== '') throw new Error(`text outside the root: ${text}`)
      if (bareAmpersand.test(text)) throw new Error(`bare & in text: ${text}`)
    } else if (bareAmpersand.test(attributes ?? '')) {
      throw new Error(`bare & in <${name}>`)
    } else if (closing === '/') {
      const top = open.pop()
      if (top !== name) throw new Error(`</${name}> closes <${top ?? ''}>`)
    } else {
      if (open.length === 0 && names.length > 0) throw new Error('a second root')
      names.push(name as string)
      if (selfClosing !== '/') open.push(name as string)
    }
  }
  if (open.length > 0) throw new Error(`<${open.join('>, <')}> not closed`)
  return names
}
