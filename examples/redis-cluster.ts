/**
 * The demo API on a Redis Cluster: one quota shared by every replica, with each
 * identity's buckets on one node (its key carries a hash tag).
 *
 *   REDIS_CLUSTER=127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002 npm run example redis-cluster
 */
import type { FastifyInstance } from 'fastify'
import { Cluster } from 'ioredis'
import { demoLines } from './server.js'
import { buildOnClient, notConnected } from './redis.js'
import type { Example } from './example.js'

/** `host:port,host:port` to ioredis startup nodes. */
export function clusterNodes (list: string): Array<{ host: string, port: number }> {
  return list.split(',').map((node) => {
    const [host = '127.0.0.1', port = '6379'] = node.trim().split(':')
    return { host, port: Number(port) }
  })
}

export async function buildClusterServer (nodes: string, logger = false): Promise<FastifyInstance> {
  // As for a single Redis: fail fast while a node is away; the store decides by failMode.
  return buildOnClient(new Cluster(clusterNodes(nodes), { enableOfflineQueue: false, redisOptions: { maxRetriesPerRequest: 0 } }), logger)
}

/** Where the example finds the cluster without `REDIS_CLUSTER`. */
const DEFAULT_CLUSTER = '127.0.0.1:7000'

export const example: Example = {
  about: `The demo API on a Redis Cluster (REDIS_CLUSTER=host:port,host:port,...; default ${DEFAULT_CLUSTER}).`,
  build: async ({ env = process.env, logger } = {}) => buildClusterServer(env.REDIS_CLUSTER ?? DEFAULT_CLUSTER, logger),
  tryIt: demoLines,
  notice: (app) => notConnected(app, process.env.REDIS_CLUSTER ?? DEFAULT_CLUSTER)
}
