from agents.sdk import Agent, local_runtime

# Each session gets a directory of its own under the state root: the model
# reads, writes, searches and runs commands there. Deleting a file asks first.
agent = Agent(
    name="Notebook",
    description="Keeps notes as files in a workspace of its own, searches them and tidies them up.",
    runtime=local_runtime(shell_timeout=20, needs_approval=["delete"]),
)
