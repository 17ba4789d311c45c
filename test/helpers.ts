/** Shared test helpers: the conformance cases, a manual clock, and app builders. */
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { Writable } from 'node:stream'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import Fastify, { type FastifyInstance, type FastifyServerOptions, type InjectOptions } from 'fastify'
import jwt from '@fastify/jwt'
import type { Test } from 'tap'
import tollgate, { memoryStore, type MemoryStore, type TollgateOptions, type BucketPolicy, type LimitDecision, type Store } from '../lib/index.js'

export interface ConformanceStep {
  atMs: number
  costs: Record<string, number>
  allowed: boolean
  tokensBefore: Record<string, number>
}
export interface ConformanceCase {
  name: string
  note: string
  policies: Record<string, BucketPolicy>
  steps: ConformanceStep[]
}

/** The project's copy of the token-bucket conformance cases (see test/fixtures/README.md). */
export const CONFORMANCE_FILE = fileURLToPath(new URL('../../test/fixtures/token-bucket.json', import.meta.url))

/** The conformance cases, from the project's copy (or the file named by TOLLGATE_CONFORMANCE). */
export function conformanceCases (): ConformanceCase[] {
  const file = process.env.TOLLGATE_CONFORMANCE ?? CONFORMANCE_FILE
  return (JSON.parse(readFileSync(file, 'utf8')) as { cases: ConformanceCase[] }).cases
}

/** A clock the test moves by hand (ms). */
export function manualClock (start = 0): { now: () => number, set: (ms: number) => void, advance: (ms: number) => void } {
  let ms = start
  return { now: () => ms, set: (value) => { ms = value }, advance: (delta) => { ms += delta } }
}

export const SECRET = 'tollgate-test-secret-0123456789'

export interface TestApp {
  app: FastifyInstance
  store: MemoryStore
  clock: ReturnType<typeof manualClock>
}

/**
 * A Fastify app with the plugin on a memory store driven by a manual clock,
 * @fastify/jwt, and a global `onRequest` hook that verifies a bearer token when
 * there is one (and leaves `request.user` null when it fails).
 */
export async function buildApp (options: Omit<TollgateOptions, 'store'>, fastifyOptions: FastifyServerOptions = {}): Promise<TestApp> {
  const clock = manualClock()
  const store = memoryStore({ clock: clock.now })
  return { app: await buildAppOn(store, options, fastifyOptions), store, clock }
}

/** `buildApp` on a store of your own (e.g. a Redis store on a manual clock). */
export async function buildAppOn (store: Store, options: Omit<TollgateOptions, 'store'>, fastifyOptions: FastifyServerOptions = {}): Promise<FastifyInstance> {
  const app = Fastify(fastifyOptions)
  await app.register(tollgate, { ...options, store })
  await app.register(jwt, { secret: SECRET })
  app.addHook('onRequest', async (request) => {
    if (request.headers.authorization === undefined) return
    try { await request.jwtVerify() } catch { /* anonymous */ }
  })
  return app
}

/** Registers the plugin with `options` (unchecked), declares `routes`, and waits for `ready()`; closes the app either way. */
export async function readyWith (options: unknown, routes: (app: FastifyInstance) => void = () => {}): Promise<void> {
  const app = Fastify()
  app.register(tollgate, options as TollgateOptions)
  app.after(() => { routes(app) })
  try {
    await app.ready()
  } finally {
    await app.close().catch(() => {})
  }
}

/** Sends `count` identical requests one after another; returns their status codes. */
export async function statuses (app: FastifyInstance, count: number, options: InjectOptions = { url: '/' }): Promise<number[]> {
  const codes: number[] = []
  for (let i = 0; i < count; i++) codes.push((await app.inject(options)).statusCode)
  return codes
}

export const count = (codes: number[], code: number): number => codes.filter((c) => c === code).length

/**
 * Runs every conformance case through a store. `setTime(ms)` moves the store's
 * clock; `tag` keeps the cases' keys apart. Tokens before a step are read back
 * from the decision: unchanged when refused, tokens after + cost when allowed.
 */
export async function storeConformance (t: Test, store: Store, setTime: (ms: number) => void, tag: string): Promise<void> {
  for (const c of conformanceCases()) {
    await t.test(c.name, async (t) => {
      for (const [n, step] of c.steps.entries()) {
        setTime(step.atMs)
        const names = Object.keys(step.costs)
        const decision = await store.consume(names.map((name) => ({
          key: `{${tag}:${c.name}}:${name}`,
          policy: c.policies[name] as BucketPolicy,
          cost: step.costs[name] as number
        })))
        t.equal(decision.allowed, step.allowed, `step ${n} at ${step.atMs} ms: allowed`)
        names.forEach((name, i) => {
          const before = (decision.tokens[i] as number) + (decision.allowed ? step.costs[name] as number : 0)
          t.ok(Math.abs(before - (step.tokensBefore[name] as number)) < 1e-6, `step ${n}: ${name} held ${step.tokensBefore[name]} (got ${before})`)
        })
      }
    })
  }
}

/** A Fastify logger (pino, level debug) whose records land, parsed, in `lines`. */
export function logSink (): { lines: Array<{ level: number, msg: string, code?: string, rateLimit?: LimitDecision, [key: string]: unknown }>, logger: { level: string, stream: Writable } } {
  const lines: Array<{ level: number, msg: string, code?: string, rateLimit?: LimitDecision, [key: string]: unknown }> = []
  const stream = new Writable({ write (chunk, _encoding, callback) { lines.push(JSON.parse(String(chunk))); callback() } })
  return { lines, logger: { level: 'debug', stream } }
}

/** The unhandled rejections of the rest of test `t` (none is what a test of a user function's promise wants). */
export function unhandledRejections (t: Test): unknown[] {
  const escaped: unknown[] = []
  const onUnhandled = (reason: unknown): void => { escaped.push(reason) }
  process.on('unhandledRejection', onUnhandled)
  t.teardown(() => { process.off('unhandledRejection', onUnhandled) })
  return escaped
}

/** What `run` threw or rejected with: its code and message. */
export async function failure (run: () => unknown): Promise<{ code: unknown, message: unknown }> {
  try {
    await run()
  } catch (error) {
    const { code, message } = error as { code?: unknown, message?: unknown }
    return { code, message }
  }
  return { code: 'none', message: 'nothing was thrown' }
}

/**
 * How late this process's event loop ran from now until `stop()`: the longest delay seen, in ms (10 ms
 * resolution). On a busy machine the process waits for a core, and every timer and reply is that late too.
 */
export function eventLoopLag (): { stop: () => number } {
  const histogram = monitorEventLoopDelay({ resolution: 10 })
  histogram.enable()
  return { stop: () => { histogram.disable(); return histogram.max / 1e6 } }
}
