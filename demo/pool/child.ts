/**
 * The pool API (server.ts) as a child process: started with its config, asked
 * for its figures over `GET /stats`, stopped. Its stdin is a pipe: if this
 * process dies, the child sees it close and exits.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { fileURLToPath } from 'node:url'
import type { ServerConfig, ServerStats } from './config.js'

export interface PoolServer {
  origin: string
  /** The API's twin on a stand-in pool, for warming the code up (server.ts). */
  warmOrigin: string
  stats: () => Promise<ServerStats>
  stop: () => Promise<void>
}

const SERVER = fileURLToPath(new URL('./server.js', import.meta.url))

/** Starts server.js with `config`; `env` goes over this process's environment (a test passes an untraced one). */
export async function startServer (config: ServerConfig, env: NodeJS.ProcessEnv = process.env): Promise<PoolServer> {
  const child = spawn(process.execPath, [SERVER, JSON.stringify(config)], { env, stdio: ['pipe', 'pipe', 'inherit'] })
  const exited = once(child, 'exit')
  let output = ''
  const ports = await new Promise<{ port: number, warmPort: number }>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      output += String(chunk)
      const line = output.split('\n')[0]
      if (output.includes('\n') && line !== undefined) resolve(JSON.parse(line) as { port: number, warmPort: number })
    })
    void exited.then(([code]) => { reject(new Error(`the pool server exited with ${String(code)} before it listened`)) })
  })
  const origin = `http://127.0.0.1:${ports.port}`
  return {
    origin,
    warmOrigin: `http://127.0.0.1:${ports.warmPort}`,
    stats: async () => await (await fetch(`${origin}/stats`)).json() as ServerStats,
    stop: async () => {
      if (child.exitCode === null) child.kill('SIGTERM')
      await exited
    }
  }
}
