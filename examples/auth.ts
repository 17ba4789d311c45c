/**
 * Demo authentication shared by the examples: `@fastify/jwt`, a hook that
 * verifies a bearer token when there is one, and `GET /token` to mint one
 * (exempt from the limits, so the printed lines can be pasted again), with a
 * quota of the user's own when asked (`capacity`, `refill`).
 * A bad token leaves `request.user` unset: the request is anonymous, never a
 * better tier. (Minting tokens for anyone is for the demo only.)
 */
import jwt from '@fastify/jwt'
import type { FastifyInstance } from 'fastify'

export const DEMO_SECRET = 'demo-secret-do-not-use-in-production'

/** Register after fastify-tollgate, so the edge hook runs before this one. */
export async function addDemoAuth (app: FastifyInstance, secret = DEMO_SECRET): Promise<void> {
  await app.register(jwt, { secret })
  app.addHook('onRequest', async (request) => {
    if (request.headers.authorization === undefined) return
    try { await request.jwtVerify() } catch { /* anonymous */ }
  })
  app.get('/token', { config: { rateLimit: false } }, async (request) => {
    const { user = 'alice', tier = 'default', capacity, refill } = request.query as { user?: string, tier?: string, capacity?: string, refill?: string }
    // capacity and refill: a quota of the user's own in the `rateLimit` claim (the pricing example reads it).
    const quota = capacity === undefined ? {} : { rateLimit: { capacity: Number(capacity), refillPerSecond: Number(refill ?? 0) } }
    return { token: app.jwt.sign({ sub: user, tier, ...quota }, { expiresIn: '1h' }) }
  })
}

/** A shell line that stores a demo token for `query` in the variable `name` (a failed fetch prints an error, not `undefined`). */
export const tokenLine = (url: string, name: string, query: string): string =>
  `${name}=$(curl -sf '${url}/token?${query}' | node -pe 'JSON.parse(require("fs").readFileSync(0)).token')`
