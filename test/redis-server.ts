/**
 * Private redis-server processes for the tests: a single server or a 3-master
 * cluster on loopback, on free ports, in a temporary folder. Never touches a
 * server it did not start. A Sentinel group builds on these: test/redis-sentinel.ts.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Test } from 'tap'
import { Redis } from 'ioredis'

function onPath (command: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

/** Set by `npm run test:quick` (test/tap.ts): the Redis suites are skipped, quietly. */
const quick = process.env.TOLLGATE_TEST_NO_REDIS === '1'

export const redisAvailable = !quick && onPath('redis-server') && onPath('redis-cli')

/** Whether this is CI (CI=true or CI=1), where the Redis suites must run. */
export const inCI = process.env.CI === 'true' || process.env.CI === '1'

/** How the skip of the Redis suites is named in the TAP: test/tap.ts knows it from any other skip. */
export const REDIS_SKIPPED = 'SKIPPED: the Redis suites'

/**
 * Whether the Redis suites can run. Without redis-server they are skipped loudly
 * outside CI, and fail in CI (CI=true), where they must run.
 */
export function requireRedis (t: Test): boolean {
  if (redisAvailable) return true
  if (quick) {
    t.pass(`${REDIS_SKIPPED} (npm run test:quick)`, { skip: true })
  } else if (inCI) {
    t.fail('redis-server and redis-cli must be on PATH in CI (.ci/run installs them)')
  } else {
    const line = '*'.repeat(78)
    process.stderr.write(`\n${line}\n* SKIPPED: Redis suites need redis-server and redis-cli on PATH (apt-get install redis-server)\n${line}\n\n`)
    t.pass(`${REDIS_SKIPPED}: redis-server is not on PATH`, { skip: true })
  }
  return false
}

function portFree (port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer()
    server.once('error', () => { resolve(false) })
    server.listen(port, '127.0.0.1', () => { server.close(() => { resolve(true) }) })
  })
}

/** A free port whose cluster bus port (+10 000) is free too. */
export async function freePort (): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 30_000)
    if (await portFree(port) && await portFree(port + 10_000)) return port
  }
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * The store's `timeoutMs` for tests about what Redis decides, not about the
 * timeout: 5 s instead of the default 50 ms. On a busy machine (load 10–15 on
 * 2 cores) a reply can be held up for hundreds of ms, and a 50 ms wait would turn
 * Redis's decision into a `failMode` one (a local share, an uncounted answer).
 */
export const PATIENT_TIMEOUT_MS = 5000

/**
 * The slowest answer a store with `timeoutMs` allows while Redis is down or silent, given `lagMs`, the event
 * loop's longest delay meanwhile (eventLoopLag in helpers.ts). A call fails `timeoutMs` to 2 × `timeoutMs` after
 * it was sent (lib/stores/redis/bounded-wait.ts). On a busy machine each of a request's three stretches (up to the
 * call, the timer's firing, after the answer) can wait for a core as long as the loop's longest delay; 50 ms for
 * Fastify and inject themselves. On a quiet machine about 2 × `timeoutMs` + 100 ms.
 */
export const answerBound = (timeoutMs: number, lagMs: number): number => 2 * timeoutMs + 3 * lagMs + 50

/** A redis-server that exited before it answered: usually its port was taken after `freePort` found it free. */
class ExitedBeforeReady extends Error {}

/**
 * Runs `use` on a short-lived client of the server (or sentinel) on `port`: no
 * reconnection, no offline queue, 1 s to connect and per command; disconnected after.
 */
export async function withClient<T> (port: number, use: (client: Redis) => Promise<T>): Promise<T> {
  const client = new Redis({ port, host: '127.0.0.1', lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000, commandTimeout: 1000 })
  client.on('error', () => {})
  try {
    await client.connect()
    return await use(client)
  } finally {
    client.disconnect()
  }
}

/**
 * Waits until the redis-server `child` answers on `port`: the server that answers
 * must be this one (its process_id), not another test's that took the port first. `timeoutMs`:
 * a busy machine (four test files at once, and a build) took more than 10 s.
 */
async function waitUntilServing (port: number, child: ChildProcess, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new ExitedBeforeReady(`redis-server on ${port} exited before it answered`)
    try {
      if (await withClient(port, async (client) => /^process_id:(\d+)/m.exec(await client.info('server'))?.[1] === String(child.pid))) return
    } catch {
      if (Date.now() > deadline) throw new Error(`redis-server on ${port} did not start`)
    }
    await sleep(50)
  }
}

export class RedisServer {
  private process: ChildProcess | undefined
  private readonly dir = mkdtempSync(join(tmpdir(), 'tollgate-redis-'))

  /**
   * `config`, if given, is written to a config file in the server's folder (once:
   * a sentinel rewrites its own) and passed first, before the other arguments.
   */
  constructor (readonly port: number, private readonly extraArgs: string[] = [], private readonly config?: string) {}

  async start (): Promise<this> {
    const configFile = join(this.dir, 'redis.conf')
    if (this.config !== undefined && !existsSync(configFile)) writeFileSync(configFile, this.config)
    this.process = spawn('redis-server', [
      ...(this.config === undefined ? [] : [configFile]), '--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
      '--dir', this.dir, '--logfile', '', '--loglevel', 'warning', ...this.extraArgs
    ], { stdio: 'ignore' })
    await waitUntilServing(this.port, this.process)
    return this
  }

  /** The server's process id while it runs. */
  get pid (): number | undefined {
    return this.process?.pid
  }

  /** Kills the server at once (SIGKILL), as a crash would. */
  async kill (): Promise<void> {
    const child = this.process
    this.process = undefined
    if (child === undefined || child.exitCode !== null) return
    const exited = new Promise((resolve) => child.once('exit', resolve))
    child.kill('SIGKILL')
    await exited
  }

  /** Kills the server (SIGKILL) and starts an empty one on the same port after `delayMs`: a crash that lost the data. */
  async restartEmpty (delayMs: number): Promise<void> {
    await this.kill()
    await sleep(delayMs)
    await this.start()
  }

  /** Freezes the server (SIGSTOP): its connections stay open and nothing answers, as on a stalled host. */
  pause (): void {
    this.process?.kill('SIGSTOP')
  }

  /** Thaws a paused server (SIGCONT). */
  resume (): void {
    this.process?.kill('SIGCONT')
  }

  async stop (): Promise<void> {
    await this.kill()
    rmSync(this.dir, { recursive: true, force: true })
  }

  /** A client of this server; disconnected when `t` ends, if given. */
  client (t?: Test): Redis {
    const client = new Redis({ port: this.port, host: '127.0.0.1', maxRetriesPerRequest: 1 })
    t?.teardown(() => { client.disconnect() })
    return client
  }
}

/**
 * Starts a redis-server on a free port, on another one if the port was taken
 * between the check and redis-server's bind (tests run in parallel). `config`:
 * see `RedisServer`. Stop it yourself (`startRedis` stops it when its test ends).
 */
export async function startOnFreePort (extraArgs: (port: number) => string[] = () => [], config?: string): Promise<RedisServer> {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort()
    const server = new RedisServer(port, extraArgs(port), config)
    try {
      return await server.start()
    } catch (error) {
      await server.stop()
      if (!(error instanceof ExitedBeforeReady) || attempt === 5) throw error
    }
  }
}

/** Starts a private redis-server on a free port; stopped when `t` ends. */
export async function startRedis (t: Test): Promise<RedisServer> {
  const server = await startOnFreePort()
  t.teardown(() => server.stop())
  return server
}

export interface RedisCluster {
  nodes: RedisServer[]
  ports: number[]
}

/** Starts three masters with `--cluster-enabled yes` and joins them; stopped when `t` ends. */
export async function startCluster (t: Test): Promise<RedisCluster> {
  const nodes: RedisServer[] = []
  t.teardown(async () => { for (const node of nodes) await node.stop() })
  for (let i = 0; i < 3; i++) {
    nodes.push(await startOnFreePort((port) => ['--cluster-enabled', 'yes', '--cluster-config-file', `nodes-${port}.conf`, '--cluster-node-timeout', '5000']))
  }
  const ports = nodes.map((node) => node.port)
  execFileSync('redis-cli', ['--cluster', 'create', ...ports.map((port) => `127.0.0.1:${port}`), '--cluster-replicas', '0', '--cluster-yes'], { stdio: 'ignore' })
  const deadline = Date.now() + 20_000
  for (const node of nodes) {
    const client = node.client()
    try {
      while (!(await client.cluster('INFO')).includes('cluster_state:ok')) {
        if (Date.now() > deadline) throw new Error('the test cluster did not become ready')
        await sleep(100)
      }
    } finally {
      client.disconnect()
    }
  }
  return { nodes, ports }
}

/** Total calls of each command on a server since it started (`INFO commandstats`). */
export async function commandCalls (client: Redis): Promise<Record<string, number>> {
  const info = await client.info('commandstats')
  const calls: Record<string, number> = {}
  for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) calls[match[1] as string] = Number(match[2])
  return calls
}
