"""The operators' dashboard in the admin: the turns that ended in a window, counted, timed and
costed (`figures`), drawn as server-side SVG (`charts`), behind the operators' door (`views`)."""
