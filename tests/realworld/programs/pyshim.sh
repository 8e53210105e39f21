#!/bin/sh
# A pyenv-style shim: a shell script that replaces itself with the real interpreter.
exec /usr/bin/python3 "$@"
