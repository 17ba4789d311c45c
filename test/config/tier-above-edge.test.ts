/** TOLLGATE_TIER_ABOVE_EDGE's comparison: what a tier admits on a route against what the edge lets one client send. */
import t from 'tap'
import { checkOptions } from '../../lib/config/options.js'
import { checkRouteConfig } from '../../lib/config/route.js'
import { tierAboveEdge } from '../../lib/config/tier-above-edge.js'
import { per } from '../../lib/index.js'

const plan = checkOptions({
  edge: { capacity: 10, refillPerSecond: 1 },
  app: { tiers: { default: { capacity: 10, refillPerSecond: 1 }, pro: { capacity: 40, refillPerSecond: 1 }, fast: { capacity: 5, refillPerSecond: 4 } } }
})
const app = plan.app as NonNullable<typeof plan.app>
const above = (config: unknown): ReturnType<typeof tierAboveEdge> => {
  const route = checkRouteConfig({ method: 'GET', url: '/r' }, config, plan)
  return route === false ? undefined : tierAboveEdge(route, app)
}

t.test('cases by name', async (t) => {
  t.match(above(undefined), { tier: 'pro', route: 'GET /r', tierBurst: 40, edgeBurst: 10, tierPerSecond: 1, edgePerSecond: 1 }, 'a burst above the edge')
  t.equal(above({ cost: 4 }), undefined, "at a cost of 4: pro's burst 10, fast's rate 1/s, both equal to the edge's: not above")
  t.match(above({ quota: { default: per(10, 'hour'), fast: { capacity: 100, refillPerSecond: 100 } } }), { tier: 'fast', tierBurst: 5, tierPerSecond: 4, edgePerSecond: 1 }, 'a rate above the edge')
  t.equal(above({ cost: 5 }), undefined, 'at a cost of 5, no tier admits more than the edge')
  t.match(above({ cost: 2 }), { tier: 'pro', tierBurst: 20 }, 'burst 20 > 10')
  t.equal(above({ edge: false }), undefined, 'the edge leaves the route alone')
  t.equal(above({ app: false }), undefined, 'the app layer leaves the route alone')
  t.equal(above({ cost: () => 1 }), undefined, 'a cost function: unknown per request')
  t.equal(above({ cost: 0 }), undefined, 'a free route is not counted by the tier')
  t.equal(above({ quota: { default: per(5, 'minute') } }), undefined, "a route quota of 5 caps every tier below the edge's 10")
  t.match(above({ quota: { default: per(5, 'minute'), pro: per(30, 'minute') } }), { tier: 'pro', tierBurst: 30 }, "pro's own entry is used")
  t.match(above({ edge: { capacity: 20, refillPerSecond: 1 } }), { tier: 'pro', edgeBurst: 10 }, "the route's edge bucket and the client's: the smaller")
  t.equal(above({ replace: true, edge: { capacity: 100, refillPerSecond: 10 }, quota: { default: per(5, 'second') } }), undefined, 'replace: the route quota against the route bucket')
  t.match(above({ replace: true, edge: { capacity: 3, refillPerSecond: 10 }, quota: { default: per(5, 'second') } }), { tier: 'default', tierBurst: 5, edgeBurst: 3 })
  t.equal(above({ replace: true, quota: { default: per(500, 'second') } }), undefined, 'replace without an edge bucket: the edge leaves the route alone')
})
