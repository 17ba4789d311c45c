// @ts-check
import js from '@eslint/js'
import tseslint from 'typescript-eslint'
import { createNodeResolver, importX } from 'eslint-plugin-import-x'

// ---------------------------------------------------------------------------
// Structure of lib/: layers, sizes. Import cycles, `import type` included: `lint:cycles` in package.json (dpdm).
// ---------------------------------------------------------------------------

// The layers of lib/, lowest first. A file may import (value or `import type`)
// files of its own layer and of earlier rows, never of a later row.
// Paths are folders (everything under them) or single files, from the repo root.
// Every file of lib/ belongs to a row; a new top-level file needs one.
const LAYERS = [
  { name: 'types', paths: ['lib/types'] }, // public types only
  { name: 'engine', paths: ['lib/engine'] },
  { name: 'output', paths: ['lib/output'] }, // errors, headers, warnings, keys, diagnostics, shadow report
  { name: 'config', paths: ['lib/config'] }, // validation
  { name: 'stores', paths: ['lib/stores'] }, // lib/stores/redis/ included
  { name: 'layers', paths: ['lib/layers'] },
  { name: 'wire', paths: ['lib/wire.ts'] },
  { name: 'top', paths: ['lib/plugin.ts', 'lib/index.ts', 'lib/metrics.ts'] }
]

// One zone per (lower, higher) pair: files of `lower` may not import files of `higher`.
const layerZones = LAYERS.flatMap((lower, i) =>
  LAYERS.slice(i + 1).map((higher, j) => ({
    target: lower.paths,
    from: higher.paths,
    message: `lib/ layer ${i} '${lower.name}' may not import layer ${i + 1 + j} '${higher.name}': imports point down the layers (eslint.config.js LAYERS).`
  }))
)

const structure = [
  {
    files: ['lib/**/*.ts'],
    plugins: { 'import-x': importX },
    settings: {
      // NodeNext sources import './x.js' for ./x.ts.
      'import-x/resolver-next': [createNodeResolver({ extensions: ['.ts', '.js'], extensionAlias: { '.js': ['.ts', '.js'] } })]
    },
    rules: {
      // Checks `import type` and `export ... from` too; an unresolvable path is not checked.
      'import-x/no-restricted-paths': ['error', { basePath: import.meta.dirname, zones: layerZones }],
      // Every line, as `wc -l` counts them.
      'max-lines': ['error', { max: 300, skipBlankLines: false, skipComments: false }],
      // A function's lines from its first to its last (a nested function counts in its parent too), blank and comment lines not counted.
      'max-lines-per-function': ['error', { max: 60, skipBlankLines: true, skipComments: true }]
    }
  }
]

export default tseslint.config(
  // test/fixtures/consumer/ is a user's project, run and type-checked against the packed package by test/package.test.ts.
  { ignores: ['dist/', 'build/', 'coverage/', '.tap/', 'node_modules/', 'test/fixtures/consumer/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: { allowDefaultProject: ['eslint.config.js'] }, tsconfigRootDir: import.meta.dirname }
    },
    rules: {
      eqeqeq: 'error',
      // Fastify handlers and hooks are async by contract, with or without an await.
      '@typescript-eslint/require-await': 'off',
      'no-var': 'error',
      'prefer-const': 'error',
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }]
    }
  },
  {
    // The bench is plain JavaScript (it loads @fastify/rate-limit, whose route types clash with ours);
    // so is scripts/build.js, which must run before anything is compiled.
    files: ['bench/**/*.js', 'scripts/**/*.js'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      parserOptions: { projectService: false, program: null, project: false },
      globals: { process: 'readonly', console: 'readonly', setTimeout: 'readonly', performance: 'readonly', globalThis: 'readonly', Buffer: 'readonly' }
    }
  },
  {
    files: ['test/**/*.ts'],
    rules: {
      // tap's t.test() returns a promise that tap itself awaits.
      '@typescript-eslint/no-floating-promises': 'off',
      // Tests read response.json(), which is `any` by design.
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off'
    }
  },
  ...structure
)
