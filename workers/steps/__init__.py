"""The step-workflow language: definitions, expressions and the interpreter."""
