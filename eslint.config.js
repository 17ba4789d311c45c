// @ts-check
import js from '@eslint/js'
import tseslint from 'typescript-eslint'

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
    // The bench is plain JavaScript (it loads @fastify/rate-limit, whose route types clash with ours).
    files: ['bench/**/*.js'],
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
  }
)
