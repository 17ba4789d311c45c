/**
 * `npm run example <name>`: serves one example; without a name, `server` (as `npm start`);
 * an unknown name lists them.
 */
import { EXAMPLES, serve, type Example } from './example.js'

const name = process.argv[2] ?? 'server'
if (!(EXAMPLES as readonly string[]).includes(name)) {
  process.stderr.write(`Unknown example "${name}". One of:\n${EXAMPLES.map((e) => `  npm run example ${e}`).join('\n')}\n`)
  process.exit(1)
}
const { example } = await import(`./${name}.js`) as { example: Example }
await serve(name, example)
