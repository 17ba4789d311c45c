/** What the capacity-protection tests share: an app with protection on a manual clock, and requests held in their handler. */
import type { FastifyInstance, LightMyRequestResponse } from 'fastify'
import { buildApp, type TestApp } from '../helpers.js'
import { protections, type ProtectionState } from '../../lib/output/protection-state.js'
import type { TollgateOptions } from '../../lib/index.js'

export const TIERS = { vip: { capacity: 100, refillPerSecond: 0 }, default: { capacity: 100, refillPerSecond: 0 }, anonymous: { capacity: 6, refillPerSecond: 0 } }

/** Handlers that wait until released; `entered`: how many reached their handler. */
export function gate (): { entered: () => number, release: () => void, wait: () => Promise<void> } {
  let entered = 0
  let open: () => void = () => {}
  let opened = new Promise<void>((resolve) => { open = resolve })
  return {
    entered: () => entered,
    release: () => { open(); opened = new Promise<void>((resolve) => { open = resolve }) },
    wait: async () => { entered++; await opened }
  }
}

export interface Protected extends TestApp {
  gauge: { value: number }
  held: ReturnType<typeof gate>
  state: () => ProtectionState
}

export async function protectedApp (t: { teardown: (fn: () => unknown) => void }, protect: TollgateOptions['protect'] = {}, options: Partial<TollgateOptions> = {}, logger?: object, routes: (app: FastifyInstance, held: ReturnType<typeof gate>) => void = () => {}): Promise<Protected> {
  const gauge = { value: 0 }
  const held = gate()
  const before = new Set(protections())
  const built = await buildApp({ app: { tiers: TIERS }, protect: { gauge: { read: () => gauge.value, target: 2 }, ...protect }, ...options }, logger === undefined ? {} : { logger })
  const hold = async (): Promise<string> => { await held.wait(); return 'ok' }
  tiered(built.app)
  routes(built.app, held)
  built.app.get('/', hold)
  built.app.get('/quick', async () => 'quick')
  built.app.get('/quick-held', hold)
  built.app.get('/critical', { config: { rateLimit: { critical: true } } }, hold)
  built.app.get('/fail', async () => { await held.wait(); throw new Error('boom') })
  await built.app.ready()
  t.teardown(async () => { held.release(); await built.app.close() })
  const state = [...protections()].find((candidate) => !before.has(candidate)) as ProtectionState
  return { ...built, gauge, held, state: () => state }
}

export const as = (tier: string, url = '/'): { url: string, headers: Record<string, string> } => ({ url, headers: { 'x-tier': tier } })

/** Sends `count` requests of `tier` that stay in their handler; resolves once all have entered it or were answered. */
export async function hold (p: Protected, count: number, tier: string, url = '/'): Promise<Array<Promise<LightMyRequestResponse>>> {
  const start = p.held.entered()
  const answered: number[] = []
  const sent = Array.from({ length: count }, (_, i) => p.app.inject(as(tier, url)).then((response) => { answered.push(i); return response }))
  while (p.held.entered() + answered.length < start + count) await new Promise((resolve) => setImmediate(resolve))
  return sent
}

export function tiered (app: FastifyInstance): void {
  app.addHook('onRequest', async (request) => {
    const tier = request.headers['x-tier']
    if (typeof tier === 'string' && tier !== 'anonymous') (request as unknown as { user: unknown }).user = { sub: `${tier}-user`, tier }
  })
}
