/**
 * What every example exports, and the runner that serves one:
 *
 *   npm run example <name>        e.g. npm run example edge-only
 *
 * Each example builds a Fastify app (not listening) so the tests can drive it
 * with `inject` and a manual clock; `serve` listens and prints lines to try.
 */
import type { FastifyInstance } from 'fastify'

/** Every example, by file name. */
export const EXAMPLES = [
  'server', 'edge-only', 'jwt-tiers', 'route-cost', 'api-key', 'shadow',
  'replica-share', 'problem-json', 'redis', 'redis-cluster',
  'login', 'pricing', 'metrics',
  // @fastify/rate-limit's README examples, translated (MIGRATING.md)
  'frl-global', 'frl-not-found', 'frl-error-response', 'frl-key-generator', 'frl-variable-max', 'frl-allow-list',
  'frl-hook', 'frl-custom-store', 'frl-callbacks', 'frl-ban', 'frl-route-config', 'frl-group', 'frl-route-override', 'frl-manual'
] as const

export interface ExampleOptions {
  /** Milliseconds; the memory store's clock. Default: the store's own (monotonic). */
  clock?: () => number
  /** Fastify's logger. Default: off (`LOG=1` turns it on). */
  logger?: boolean
  /** Where settings such as `REDIS_URL` come from. Default: `process.env`. */
  env?: NodeJS.ProcessEnv
}

export interface Example {
  /** One line: what it shows. */
  about: string
  build: (options?: ExampleOptions) => Promise<FastifyInstance>
  /** Shell lines that show the limit at work against `url`, for the settings in `env`; a blank line separates steps. */
  tryIt: (url: string, env: NodeJS.ProcessEnv) => string
  /** Once listening: a line on something wrong at startup (Redis not connected), or undefined. */
  notice?: (app: FastifyInstance) => string | undefined
}

/** Listens on HOST:PORT (default 127.0.0.1:3000), prints lines to try, and closes on SIGINT or SIGTERM. */
export async function serve (name: string, example: Example): Promise<void> {
  const app = await example.build({ logger: process.env.LOG === '1' })
  const port = Number(process.env.PORT ?? 3000)
  const url = await app.listen({ port, host: process.env.HOST ?? '127.0.0.1' })
  const notice = example.notice?.(app)
  process.stdout.write(`fastify-tollgate example "${name}" listening on ${url}
${example.about}
${notice === undefined ? '' : `\n${notice}\n`}
Try it:
${example.tryIt(url, process.env).split('\n').map((line) => line === '' ? '' : `  ${line}`).join('\n')}

Press Ctrl+C to stop.
`)
  const stop = (): void => { void app.close().then(() => process.exit(0)) }
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
}
