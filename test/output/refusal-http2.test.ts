// A refusal answered from the hook on HTTP/2: no status message is read or set
// (HTTP/2 has none, and touching it emits an UnsupportedWarning, once per process:
// hence a file of its own).
import Fastify from 'fastify'
import { connect } from 'node:http2'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import tollgate, { memoryStore } from '../../lib/index.js'

t.test('HTTP/2: a prepared 429 emits no process warning', async (t) => {
  const warnings: string[] = []
  const onWarning = (warning: Error): void => { warnings.push(`${warning.name}: ${warning.message}`) }
  process.on('warning', onWarning)
  t.teardown(() => { process.off('warning', onWarning) })
  const app = Fastify({ http2: true })
  await app.register(tollgate, { store: memoryStore(), edge: { capacity: 1, refillPerSecond: 0.001 } })
  app.get('/', async () => ({ ok: 1 }))
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => app.close())
  const client = connect(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`)
  t.teardown(() => { client.close() })
  const answers: Array<{ status: unknown, body: string }> = []
  for (let i = 0; i < 2; i++) {
    answers.push(await new Promise((resolve, reject) => {
      const request = client.request({ ':path': '/' })
      let status: unknown
      let body = ''
      request.on('response', (headers) => { status = headers[':status'] })
      request.on('data', (chunk: Buffer) => { body += chunk.toString() })
      request.on('end', () => { resolve({ status, body }) })
      request.on('error', reject)
      request.end()
    }))
  }
  t.same(answers.map((answer) => answer.status), [200, 429])
  t.match(JSON.parse(answers[1]?.body ?? '{}'), { statusCode: 429, code: 'TOLLGATE_RATE_LIMITED' })
  // A warning is emitted on the next tick.
  await new Promise((resolve) => setImmediate(resolve))
  t.same(warnings, [])
})
