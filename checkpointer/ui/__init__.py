"""`checkpointer ui`: a local web viewer for threads, forks and state.

    pip install -e ".[ui]"
    checkpointer ui --url chat.db --graph myapp.graph:builder

Modules, each small: `data` (everything read or written, behind one class), `tree`
(checkpoints as linear runs and branches), `values` (stored values as escaped HTML),
`pages` (what each part of the page shows), `security` (token, host and origin checks),
`app` (routes and templates), `server` (uvicorn).
"""
