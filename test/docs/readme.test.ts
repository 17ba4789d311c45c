/**
 * What a new user tries first, tried as they would:
 *
 * - README.md is short, in the order a user needs it (under 400 lines of at most
 *   120 characters), lists every example and links every page of docs/;
 * - (README.md's ```ts blocks are type-checked and run in blocks.test.ts, with
 *   MIGRATING.md's and docs/'s);
 * - the lines `npm start`, `npm run example jwt-tiers`, `route-cost`, `replica-share`,
 *   `redis` and most `frl-*` print under "Try it:", sent in order with fetch as bash and curl would, give
 *   the statuses their comments print (the first two pasted twice: the token
 *   fetches still succeed, and so do the lines whose buckets are not spent).
 */
import t, { type Test } from 'tap'
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { requireRedis, startRedis } from '../redis-server.js'
import { PASTED_FRL, runExample } from '../run-example.js'
import { EXAMPLES } from '../../examples/example.js'
import { ROOT } from './documents.js'

// Child processes and a TypeScript program of their own: more than tap's 30 s on a busy machine.
t.setTimeout(240_000)
// The tests below one at a time (their blocks and frl-* examples four at a time): the lines an example
// prints are pasted one after another in real time, and beside other tests they saw a token refill between two.

const README = readFileSync(join(ROOT, 'README.md'), 'utf8')

t.test('README: short, in the order a user needs it', async (t) => {
  const lines = README.split('\n')
  t.ok(lines.length <= 400, `${lines.length} lines`)
  t.same(lines.map((line, i) => [i + 1, line.length]).filter(([, length]) => (length as number) > 120), [], 'no line over 120 characters')
  const sections = lines.filter((line) => line.startsWith('## ')).map((line) => line.slice(3))
  const order = ['Install', 'Quick start', 'Options at a glance', 'Several replicas', 'Headers and errors', 'Watching it',
    'Protecting capacity', 'Coming from `@fastify/rate-limit`', 'Examples', 'Documentation']
  t.same(order.map((name) => sections.findIndex((section) => section.startsWith(name))), order.map((_, i) => i), `sections in order: ${sections.join(' | ')}`)
  t.match(README, /B \+ R·t/, 'the token bucket\'s bound')
  t.match(README, /^npm pack$/m, 'an install that works before the package is published')
  t.match(README, /^npm i \.\/fastify-tollgate-\d+\.\d+\.\d+\.tgz fastify$/m, 'and the tarball installed')
  t.match(README, /^npm i fastify-tollgate fastify$/m, 'the install once published')
  t.match(README, /Node\.js 20\.19 or later/, 'the Node requirement')
  t.notMatch(README, /^## (Development|Performance|Engine)\b/m, 'no contributor or benchmark sections: they have pages of their own')
})

t.test('README: the examples table names every example (the frl-* ones are in MIGRATING.md)', async (t) => {
  const migrating = readFileSync(join(ROOT, 'MIGRATING.md'), 'utf8')
  for (const name of EXAMPLES) {
    if (name === 'server') t.match(README, /`npm start` \(= `npm run example server`\)/, name)
    else if (name.startsWith('frl-')) t.ok(migrating.includes(`\`${name}\``), `${name} in MIGRATING.md`)
    else t.ok(README.includes(`| \`npm run example ${name}\` |`), name)
  }
})

// ------------------------------------------------------------ example banners

/**
 * What one banner line gave, and what its comment says it gives; `refills`: how many
 * tokens its buckets can have refilled since the paste began, when its last answer came.
 */
interface LineResult { line: string, statuses: number[], expected: string | undefined, refills: number }

/** One answer: its status, and its fastest refill (tokens a second) that `RateLimit-Policy` shows. */
interface Sent { status: number, perSecond: number }

/** The lines an example prints under "Try it:", without their indent; a blank line separates steps. */
function tryIt (banner: string): string[][] {
  const from = banner.indexOf('\nTry it:\n')
  const to = banner.indexOf('\nPress Ctrl+C')
  const lines = banner.slice(from + '\nTry it:\n'.length, to).trimEnd().split('\n').map((line) => line.replace(/^ {2}/, ''))
  const steps: string[][] = [[]]
  for (const line of lines) {
    if (line.trim() === '') steps.push([])
    else steps.at(-1)?.push(line)
  }
  return steps
}

/**
 * A status expectation at the start of a comment: status codes and `…` (the
 * code before it, any number of times more), up to a `:`, a `,` or the end.
 */
function expectation (comment: string): string | undefined {
  return /^((?:\d{3}|…)(?: (?:\d{3}|…))*)(?=$|[:,])/.exec(comment)?.[1]
}

/**
 * How many of `statuses` must be 200s in place of the expectation's 429s for them to match it
 * (`200 200 429`, or `200 … 429 …`: `…` the code before it, any number of times more): what
 * tokens refilled while a line ran can explain. Infinity when no such change makes them match.
 */
function refillsNeeded (expected: string, statuses: number[]): number {
  const items: Array<{ code: number, more: boolean }> = []
  for (const token of expected.split(' ')) items.push(token === '…' ? { code: items.at(-1)?.code ?? NaN, more: true } : { code: Number(token), more: false })
  const cost = (got: number, code: number): number => got === code ? 0 : got === 200 && code === 429 ? 1 : Infinity
  const memo = new Map<string, number>()
  const best = (i: number, j: number): number => {
    const item = items[j]
    if (item === undefined) return i === statuses.length ? 0 : Infinity
    let found = memo.get(`${i} ${j}`)
    if (found !== undefined) return found
    const here = i < statuses.length ? cost(statuses[i] as number, item.code) : Infinity
    const next = here === Infinity ? Infinity : here + (item.more ? best(i + 1, j) : best(i + 1, j + 1))
    found = item.more ? Math.min(best(i, j + 1), next) : next
    memo.set(`${i} ${j}`, found)
    return found
  }
  return best(0, 0)
}

/**
 * The fastest refill an answer's headers allow, in tokens a second, at most. `RateLimit-Policy`: `w` is
 * the capacity's refill time rounded up (lib/output/headers.ts), so each member refills under q / (w − 1)
 * (with `w=1`: q). The legacy and draft-03 trio shows one bucket: its `reset`, the seconds until full rounded
 * up, is over its missing tokens (under limit + 1 − remaining) / refill, less one. 0 without these headers.
 */
function fastestRefill (headers: Headers): number {
  const policy = headers.get('ratelimit-policy')
  if (policy !== null) {
    const rates = [...policy.matchAll(/;q=(\d+);w=(\d+)/g)].map(([, q, w]) => Number(w) > 1 ? Number(q) / (Number(w) - 1) : Number(q))
    return Math.max(0, ...rates)
  }
  const [limit, remaining, reset] = ['limit', 'remaining', 'reset'].map((name) => headers.get(`x-ratelimit-${name}`) ?? headers.get(`ratelimit-${name}`))
  if (limit === null || remaining === null || reset === null) return 0
  const missing = Number(limit) + 1 - Number(remaining)
  return Number(reset) > 1 ? missing / (Number(reset) - 1) : missing
}

/** Whether statuses match an expectation exactly. */
const meets = (expected: string, statuses: number[]): boolean => refillsNeeded(expected, statuses) === 0

/** Shell words, with `$NAME` expanded outside single quotes. */
function words (text: string, vars: Map<string, string>): string[] {
  const expand = (s: string): string => s.replace(/\$(\w+)|\$\{(\w+)\}/g, (_, a?: string, b?: string) => vars.get(a ?? b ?? '') ?? '')
  return [...text.matchAll(/'([^']*)'|"([^"]*)"|(\S+)/g)].map(([, single, double, bare]) => single ?? expand(double ?? bare ?? ''))
}

/** One `curl` command, sent with fetch. */
async function curl (command: string, vars: Map<string, string>): Promise<Sent> {
  const args = words(command, vars).slice(1)
  let url: string | undefined
  let method = 'GET'
  const headers: Record<string, string> = {}
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string
    if (arg === '-i' || arg === '-s' || arg === '-si') continue
    else if (arg === '-o' || arg === '-w') i++
    else if (arg === '-X') method = args[++i] as string
    else if (arg === '-H') {
      const [name = '', ...value] = (args[++i] as string).split(':')
      headers[name.trim()] = value.join(':').trim()
    } else if (/^https?:\/\//.test(arg)) url = arg
    else throw new Error(`a curl argument this test does not know: ${arg} in ${command}`)
  }
  if (url === undefined) throw new Error(`no URL in ${command}`)
  const response = await fetch(url, { method, headers })
  await response.arrayBuffer()
  return { status: response.status, perSecond: fastestRefill(response.headers) }
}

/**
 * Runs a step's lines in order, as bash would (the forms the banners use); returns what each request line gave.
 * The example's buckets are full when the paste begins (a fresh example, or buckets an earlier paste did not
 * spend); by a line's last answer, each can have refilled at most its rate × the seconds since (B + R·t), and
 * the printed statuses assume none of it.
 */
async function runLines (lines: string[], vars: Map<string, string>): Promise<LineResult[]> {
  const results: LineResult[] = []
  const began = performance.now()
  for (const line of lines) {
    if (line.trimStart().startsWith('#')) continue
    const [, command = '', comment = ''] = /^(.*?)(?:; echo)?(?:\s+#\s(.*))?$/.exec(line) ?? []
    const token = /^(\w+)=\$\(curl -sf '([^']+)' \| node -pe '.*\.token'\)$/.exec(command)
    const loop = /^for (\w+) in (.+?); do (curl .+?); done(?:; echo)?$/.exec(command)
    if (token !== null) {
      const response = await fetch(token[2] as string)
      if (response.status !== 200) throw new Error(`the token fetch gave ${response.status}: ${line}`)
      const { token: value } = await response.json() as { token: string }
      vars.set(token[1] as string, value)
      continue
    }
    const sent: Sent[] = []
    if (loop !== null) {
      const [, name = '', list = '', body = ''] = loop
      const seq = /^\$\(seq (\d+)\)$/.exec(list)
      const items = seq === null ? words(list, vars) : Array.from({ length: Number(seq[1]) }, (_, i) => String(i + 1))
      for (const item of items) {
        vars.set(name, item)
        sent.push(await curl(body, vars))
      }
    } else if (command.startsWith('curl ')) {
      sent.push(await curl(command, vars))
    } else {
      throw new Error(`a banner line this test does not know how to run: ${line}`)
    }
    const refills = Math.floor(Math.max(0, ...sent.map((answer) => answer.perSecond)) * (performance.now() - began) / 1000)
    results.push({ line, statuses: sent.map((answer) => answer.status), expected: expectation(comment), refills })
  }
  return results
}

function checkLines (t: Test, results: LineResult[]): void {
  t.ok(results.length > 0, 'lines that send requests')
  for (const { line, statuses, expected, refills } of results) {
    if (expected === undefined) t.fail(`prints the statuses it gives: ${line}`)
    else {
      // On a busy machine a paste takes seconds: a 200 in place of a printed 429 is what a refill meanwhile explains.
      const needed = refillsNeeded(expected, statuses)
      t.ok(needed <= refills, `prints ${expected}, gives ${statuses.join(' ')}${needed > 0 ? ` (${needed} refilled, up to ${refills} could)` : ''}: ${line}`)
    }
  }
}

t.test('the expectation grammar of the banners', async (t) => {
  t.equal(expectation('200 200 429'), '200 200 429')
  t.equal(expectation('200, RateLimit headers'), '200')
  t.equal(expectation('200 … 429 …: no token'), '200 … 429 …')
  t.equal(expectation('VIP: a larger quota'), undefined)
  t.ok(meets('200 200 429', [200, 200, 429]))
  t.notOk(meets('200 200 429', [200, 429, 429]))
  t.ok(meets('200 … 429 …', [200, 200, 200, 429, 429]))
  t.ok(meets('200 … 429 …', [200, 429]))
  t.notOk(meets('200 … 429 …', [429, 429]))
  t.notOk(meets('200 … 429 …', [200, 429, 200]))
  t.equal(refillsNeeded('200 … 429 …', [200, 429, 200, 429]), 1, 'a 200 after a 429: one refill')
  t.equal(refillsNeeded('200 200 429', [200, 200, 200]), 1)
  t.equal(refillsNeeded('200 200 429', [200, 429, 429]), Infinity, 'a refill never refuses')
  t.equal(refillsNeeded('200 200 429', [200, 200]), Infinity)
  const refill = (headers: Record<string, string>): number => fastestRefill(new Headers(headers))
  t.equal(refill({ 'ratelimit-policy': '"edge";q=10;w=5, "app";q=20;w=4' }), 20 / 3, 'the fastest member, w rounded up')
  t.equal(refill({ 'ratelimit-policy': '"edge";q=5;w=1' }), 5)
  t.equal(refill({ 'ratelimit-policy': '"edge";q=5' }), 0, 'no refill')
  t.equal(refill({ 'x-ratelimit-limit': '100', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '60' }), 101 / 59, '100 a minute')
  t.equal(refill({ 'ratelimit-limit': '5', 'ratelimit-remaining': '4', 'ratelimit-reset': '1' }), 2)
  t.equal(refill({}), 0)
})

/**
 * Pastes an example's one block (twice with `again`): the first paste gives every printed
 * status; the second fetches its tokens again (a refused fetch throws) and gives
 * the printed statuses on the lines matching `again`, whose buckets the first
 * paste did not spend.
 */
async function pasteTwice (t: Test, name: string, again?: RegExp): Promise<void> {
  const { banner } = await runExample(t, name)
  const steps = tryIt(banner)
  t.equal(steps.length, 1, 'one block')
  const lines = steps[0] ?? []
  const first = await runLines(lines, new Map())
  checkLines(t, first)
  // examples.test.ts leaves these examples to this file: that they limit over real HTTP is checked here.
  // On a busy machine a bucket refilling 5/s can outpace a line's requests: then a measured refill explains each 200.
  const explained = first.some(({ expected, statuses, refills }) => expected?.includes('429') === true && refillsNeeded(expected, statuses) <= refills)
  t.ok(first.some(({ statuses }) => statuses.includes(429)) || explained, 'the limit answers 429 on some line (or a refill meanwhile explains why not)')
  if (again === undefined) return
  const second = (await runLines(lines, new Map())).filter(({ line }) => again.test(line))
  t.ok(second.length > 0, 'lines checked again')
  checkLines(t, second)
}

t.test('npm start: the lines it prints, pasted as one block (twice), give what they print', async (t) => {
  await pasteTwice(t, 'server', /\$TOKEN|\$VIP|\/health/)
})

t.test('npm run example jwt-tiers: the lines it prints, pasted as one block (twice), give what they print', async (t) => {
  await pasteTwice(t, 'jwt-tiers', /\$PRO/)
})

t.test('npm run example route-cost / replica-share: the lines they print, pasted as one block, give what they print', async (t) => {
  await pasteTwice(t, 'route-cost')
  await pasteTwice(t, 'replica-share')
})

t.test('npm run example frl-*: the lines they print, pasted as one block, give what they print', { jobs: 4 }, async (t) => {
  for (const name of PASTED_FRL) void t.test(name, async (t) => { await pasteTwice(t, name) })
})

t.test('npm run example redis: says which Redis it uses, how to start a second replica, and the two share one quota', async (t) => {
  if (!requireRedis(t)) return
  const redisUrl = `redis://127.0.0.1:${(await startRedis(t)).port}`
  const first = await runExample(t, 'redis', { REDIS_URL: redisUrl })
  const [here = [], ...next] = tryIt(first.banner)
  const vars = new Map<string, string>()
  checkLines(t, await runLines(here, vars))

  const both = next.flat()
  const start = both.map((line) => /REDIS_URL=(\S+) PORT=(\d+) PEER=(\S+) npm run example redis/.exec(line)).find((match) => match !== null)
  if (start === undefined || start === null) return t.fail(`tells how to start a second replica:\n${first.banner}`)
  const [, url = '', port = '', peer = ''] = start
  t.equal(url, redisUrl, 'on the Redis this one uses')
  t.equal(peer, first.url, 'pointing the second at this one')
  const own = new URL(first.url)
  t.not(port, own.port, `on another port than its own (${own.port})`)
  const second = await runExample(t, 'redis', { REDIS_URL: url, PEER: peer })
  // The second replica's lines send to itself and to the first, not to a third port.
  const secondLoop = tryIt(second.banner).flat().find((line) => line.startsWith('for u in'))
  t.equal(secondLoop?.split(';')[0], `for u in ${second.url} ${first.url} ${second.url}`, 'the second replica aims at the first')
  t.notMatch(second.banner, /npm run example redis/, 'and does not ask for a third')
  // The test cannot count on the suggested port being free: it runs the second replica where it can, and says so.
  const suggested = `${own.protocol}//${own.hostname}:${port}`
  checkLines(t, await runLines(both.map((line) => line.replaceAll(suggested, second.url)), vars))
})
