module github.com/deadlinekit/deadlinekit

go 1.26
